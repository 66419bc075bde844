/* compat
[{"method": "POST", "path": "/", "chunks": ["part one, ", "part two, ", "part three"]}]
*/
// crypto.DigestStream (a Workers API): hash a request body as it streams.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');

export default {
  async fetch(request) {
    const ds = new crypto.DigestStream('SHA-256');
    await request.body.pipeTo(ds);
    const digest = await ds.digest;
    const check = await crypto.subtle.digest('SHA-256', new TextEncoder().encode('part one, part two, part three'));
    return Response.json({
      digest: hex(digest), same: hex(digest) === hex(check), isWritable: ds instanceof WritableStream,
      bytesWritten: [typeof ds.bytesWritten, String(ds.bytesWritten)],
    });
  },
};

/* compat
[{"method": "POST", "path": "/", "body": "0123456789abcdefghijklmnopqrstuvwxyz"},
 {"method": "POST", "path": "/", "chunks": ["first,", "second,", "third"]}]
*/
// A request body read as a stream, chunk by chunk (chunk boundaries are the
// transport's, so only the bytes are reported).
export default {
  async fetch(request) {
    const reader = request.body.getReader();
    const parts = [];
    let total = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (!(value instanceof Uint8Array)) return new Response('chunk is not a Uint8Array', { status: 500 });
      parts.push(value);
      total += value.length;
    }
    const all = new Uint8Array(total);
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.length;
    }
    return Response.json({ total, text: new TextDecoder().decode(all), used: request.bodyUsed });
  },
};

/* compat
[{"path": "/u8"}, {"path": "/ab"}, {"path": "/view"}, {"path": "/dataview"}, {"path": "/blob"}]
*/
// Binary bodies of every BufferSource kind, all 256 byte values.
const all = new Uint8Array(256).map((_, i) => i);

export default {
  fetch(request) {
    const kind = new URL(request.url).pathname.slice(1);
    const headers = { 'content-type': 'application/octet-stream' };
    switch (kind) {
      case 'u8': return new Response(all, { headers });
      case 'ab': return new Response(all.slice().buffer, { headers });
      case 'view': return new Response(new Uint16Array(all.buffer, 2, 4), { headers });
      case 'dataview': return new Response(new DataView(all.buffer, 250), { headers });
      default: return new Response(new Blob([all.subarray(0, 10), 'tail']), { headers });
    }
  },
};

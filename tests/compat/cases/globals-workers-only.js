/* compat
[{"path": "/"}]
*/
// Globals of the Workers platform edgenode does not offer (yet, or by
// design), and the Performance interface object workerd leaves out.
export default {
  fetch() {
    const out = {};
    for (const n of ['caches', 'WebSocket', 'HTMLRewriter', 'EventSource', 'WebAssembly', 'Performance']) {
      out[n] = typeof globalThis[n];
    }
    return Response.json(out);
  },
};

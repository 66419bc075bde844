/* compat
[{"path": "/props"}, {"path": "/return"}]
*/
// Response.error(): its properties, and what returning one does.
export default {
  fetch(request) {
    const r = Response.error();
    if (new URL(request.url).pathname === '/return') return r;
    return Response.json({ type: r.type, status: r.status, ok: r.ok, statusText: r.statusText, body: r.body });
  },
};

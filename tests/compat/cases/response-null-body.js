/* compat
[{"path": "/204"}, {"path": "/304"}, {"path": "/205"}, {"path": "/empty"}, {"path": "/reject"}, {"method": "HEAD", "path": "/head"}]
*/
// Null body statuses and HEAD requests.
export default {
  fetch(request) {
    const p = new URL(request.url).pathname.slice(1);
    if (p === 'empty') return new Response('', { status: 200 });
    if (p === 'head') return new Response('a body HEAD must not carry', { headers: { 'x-method': request.method } });
    if (p === 'reject') {
      try {
        return new Response('x', { status: 204 });
      } catch (err) {
        return new Response(err.name);
      }
    }
    return new Response(null, { status: Number(p), headers: { 'x-status': p } });
  },
};

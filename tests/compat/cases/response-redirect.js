/* compat
[{"path": "/302"}, {"path": "/301"}, {"path": "/307"}, {"path": "/308"}, {"path": "/303"}, {"path": "/bad"}]
*/
// Response.redirect: statuses, the Location header, immutable headers.
export default {
  fetch(request) {
    const p = new URL(request.url).pathname.slice(1);
    if (p === 'bad') {
      const out = {};
      for (const s of [200, 304, 399]) {
        try {
          Response.redirect('https://example.com/', s);
        } catch (err) {
          out[s] = err.name;
        }
      }
      try {
        Response.redirect('not a url');
      } catch (err) {
        out.badUrl = err.name;
      }
      const r = Response.redirect('https://example.com/x', 301);
      try {
        r.headers.set('x', '1');
        out.immutable = false;
      } catch (err) {
        out.immutable = err.name;
      }
      out.body = r.body;
      return Response.json(out);
    }
    if (p === '302') return Response.redirect('https://example.com/a b?c=ü#f');
    return Response.redirect(new URL('/relative/target', 'https://example.org'), Number(p));
  },
};

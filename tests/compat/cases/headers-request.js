/* compat
[{"path": "/", "headers": [["X-One", "1"], ["x-two", " spaced  "], ["X-One", "again"], ["Accept-Language", "en, fr;q=0.5"]]},
 {"path": "/", "headers": [["Cookie", "a=1"], ["Cookie", "b=2"], ["X-Empty", ""]]}]
*/
// What a worker sees of the request headers a client sent.
export default {
  fetch(request) {
    const h = request.headers;
    const pick = ['x-one', 'x-two', 'accept-language', 'cookie', 'x-empty', 'x-missing'];
    const out = {};
    for (const name of pick) out[name] = h.get(name);
    out.has = h.has('X-ONE');
    try {
      h.set('x-new', '1');
      out.mutable = true;
    } catch (err) {
      out.mutable = err.name;
    }
    return Response.json(out);
  },
};

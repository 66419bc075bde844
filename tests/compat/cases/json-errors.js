/* compat
[{"method": "POST", "path": "/", "body": "{not json"},
 {"method": "POST", "path": "/", "body": ""},
 {"method": "POST", "path": "/empty-object", "body": "{}"}]
*/
// Bad JSON bodies: the error a handler catches, and Response.json edge cases.
export default {
  async fetch(request) {
    const out = {};
    try {
      out.parsed = await request.json();
    } catch (err) {
      out.error = err.name;
    }
    try {
      const cyclic = {};
      cyclic.self = cyclic;
      Response.json(cyclic);
    } catch (err) {
      out.cyclic = err.name;
    }
    const r = Response.json({ n: 1 }, { status: 418, statusText: 'teapot', headers: { 'content-type': 'application/vnd.x+json' } });
    out.custom = [r.status, r.statusText, r.headers.get('content-type'), await r.text()];
    return Response.json(out, { status: out.error ? 400 : 200 });
  },
};

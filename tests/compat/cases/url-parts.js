/* compat
[{"path": "/a/b/../c/./d?x=1&y=%20z#frag"},
 {"path": "/%7Euser/caf%C3%A9?q=%E2%9C%93"},
 {"path": "//double//slash?"}]
*/
// The parts of the incoming URL, and the URL API on it.
export default {
  fetch(request) {
    const u = new URL(request.url);
    const out = { url: request.url };
    for (const k of ['href', 'origin', 'protocol', 'username', 'password', 'host', 'hostname',
      'port', 'pathname', 'search', 'hash']) out[k] = u[k];
    out.searchParams = [...u.searchParams];
    out.json = u.toJSON();
    out.string = String(u);
    return Response.json(out);
  },
};

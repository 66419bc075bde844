/* compat
[{"path": "/"}]
*/
// URLPattern from constructor strings and from a baseURL. The URL Pattern
// standard (since late 2023) wildcards the components a string leaves out
// after the last one it gives (and username/password), and inherits from a
// baseURL only the components left of those given ("inherit left, wildcard
// right"); workerd implements the earlier rule that makes them empty.
const patterns = [
  ['https://example.com/books/:id'],
  ['/users/:user', 'https://example.com'],
  ['https://*.example.com/*'],
  ['http://localhost:8080/:rest*'],
  ['https://example.com/foo?bar#baz'],
  ['https://example.com'],
  ['data\\:foo*'],
  ['https://user:pass@example.com:8443/p'],
  ['?q=:term', 'https://example.com/search'],
  [{ pathname: '/books/:id', baseURL: 'https://example.com' }],
  [{ pathname: 'relative/:x', baseURL: 'https://example.com/dir/page' }],
];

export default {
  fetch() {
    const out = [];
    for (const args of patterns) {
      try {
        const p = new URLPattern(...args);
        const c = {};
        for (const k of ['protocol', 'username', 'password', 'hostname', 'port', 'pathname', 'search', 'hash']) c[k] = p[k];
        out.push([args, c, p.test('https://example.com/books/1?x=1'), p.test('https://example.com/foo?bar#baz')]);
      } catch (err) {
        out.push([args, err.name]);
      }
    }
    return Response.json(out);
  },
};

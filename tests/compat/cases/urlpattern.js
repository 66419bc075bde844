/* compat
[{"path": "/"}]
*/
// URLPattern from dictionaries: the normalised component patterns, and
// matching with groups.
const patterns = [
  [{ protocol: 'https', hostname: 'example.com', pathname: '/books/:id' }],
  [{ pathname: '/users/:user/posts/:post?' }],
  [{ pathname: '/api/*' }],
  [{ pathname: '/files/:path+' }],
  [{ pathname: '/files/:path*' }],
  [{ hostname: '{:sub.}?example.com' }],
  [{ pathname: '/(\\d+)' }],
  [{ pathname: '/:id(\\d+)' }],
  [{ hostname: '*.example.com' }],
  [{ pathname: '/Case', search: 'q=:q' }, { ignoreCase: true }],
  [{ hostname: 'localhost', port: '8080', pathname: '/:rest*' }],
  [{ protocol: 'http{s}?' }],
  [{ pathname: '/a/:b/c', hash: 'frag' }],
  [{ pathname: '/café/:x' }],
  [{ pathname: '/blog/:year(\\d{4})-:month(\\d{2})' }],
  [{ search: '*', hash: '*' }],
  [{ hostname: 'example.com', pathname: '/%7euser/a b' }],
  [{ pathname: '/*.:ext' }],
];const urls = [
  'https://example.com/books/123', 'https://example.com/users/ada/posts', 'https://example.com/users/ada/posts/7',
  'https://x.org/api/v1/items', 'https://x.org/files/a/b/c', 'https://x.org/files', 'https://www.example.com/',
  'https://example.com/', 'https://x.org/42', 'https://x.org/abc', 'https://a.b.example.com/anything',
  'https://x.org/case?q=Term', 'http://localhost:8080/deep/path', 'https://x.org/a/b/c#frag',
  'https://x.org/caf%C3%A9/1', 'https://x.org/blog/2024-05', 'https://x.org:443/', 'https://example.com/foo?bar#baz',
  'https://x.org/one-two', 'https://x.org/one', 'https://example.com/dir/relative/9',
  'https://example.com/~user/a%20b', 'https://x.org/archive.tar.gz',
];

export default {
  fetch() {
    const out = [];
    for (const args of patterns) {
      let p;
      try {
        p = new URLPattern(...args);
      } catch (err) {
        out.push({ args, error: err.name });
        continue;
      }
      const entry = { args, components: {}, matches: {} };
      for (const k of ['protocol', 'username', 'password', 'hostname', 'port', 'pathname', 'search', 'hash']) {
        entry.components[k] = p[k];
      }
      for (const u of urls) {
        const m = p.exec(u);
        if (m === null) continue;
        const groups = {};
        for (const k of ['hostname', 'pathname', 'search']) {
          // Groups that matched nothing are left out: workerd and the
          // standard disagree on them (see urlpattern-unmatched-groups).
          for (const [g, v] of Object.entries(m[k].groups)) if (v !== undefined && v !== '') groups[`${k}.${g}`] = v;
        }
        entry.matches[u] = groups;
      }
      out.push(entry);
    }
    return Response.json(out);
  },
};

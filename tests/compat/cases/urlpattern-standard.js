/* compat
[{"path": "/unmatched-group"}, {"path": "/default-port"}, {"path": "/lazy-segments"}, {"path": "/hostname-case"},
 {"path": "/base-with-init"}, {"path": "/has-regexp-groups"}]
*/
// Where edgenode follows the URL Pattern standard and this workerd version
// does not (one request each): a group that matched nothing is undefined
// (workerd: ""); a special scheme's default port in a pattern means "no
// port"; segments match lazily ("/:a{-:b}?" splits "one-two"); hostnames are
// canonicalized like a special URL's; a baseURL beside a URLPatternInit is a
// TypeError; hasRegExpGroups exists.
function attempt(fn) {
  try {
    return JSON.stringify(fn());
  } catch (err) {
    return `throws ${err.name}`;
  }
}

export default {
  fetch(request) {
    switch (new URL(request.url).pathname) {
      case '/unmatched-group':
        return new Response(attempt(() => {
          const tab = new URLPattern({ pathname: '/users/:user/:tab?' }).exec('https://x.org/users/ada').pathname.groups.tab;
          return tab === undefined ? 'undefined' : tab;
        }));
      case '/default-port':
        return new Response(attempt(() => {
          const p = new URLPattern({ protocol: 'https', port: '443' });
          return [p.port, p.test('https://x.org/')];
        }));
      case '/lazy-segments':
        return new Response(attempt(() => new URLPattern({ pathname: '/:a{-:b}?' }).exec('https://x.org/one-two').pathname.groups));
      case '/hostname-case':
        return new Response(attempt(() => new URLPattern({ hostname: 'EXAMPLE.com' }).hostname));
      case '/base-with-init':
        return new Response(attempt(() => new URLPattern({ pathname: '/x' }, 'https://a.com').pathname));
      default:
        return new Response(attempt(() => [typeof new URLPattern({}).hasRegExpGroups, new URLPattern({ pathname: '/(\\d+)' }).hasRegExpGroups]));
    }
  },
};

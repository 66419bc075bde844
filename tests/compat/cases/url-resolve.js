/* compat
[{"path": "/"}]
*/
// Relative resolution, setters and static helpers.
const cases = [
  ['../x', 'http://h/a/b/c'], ['?q', 'http://h/a/b?old#f'], ['#h', 'http://h/p?q'],
  ['//other/p', 'https://h/x'], ['/abs', 'http://h:8080/a/b'], ['x', 'file:///dir/file'],
  ['HTTP://EXAMPLE.COM:80/%7e', undefined], ['http://[::1]:3000/', undefined],
  ['http://192.168.0.257/', undefined], ['http://0x7f.1/', undefined], ['mailto:a@b', undefined],
  ['http://user:pa ss@h/', undefined], ['http://münchen.de/', undefined], ['not a url', undefined],
  ['https://h/ä?ä#ä', undefined], ['data:text/plain,hi', undefined],
];

export default {
  fetch() {
    const out = [];
    for (const [input, base] of cases) {
      try {
        out.push(new URL(input, base).href);
      } catch (err) {
        out.push(`${err.name}`);
      }
    }
    const u = new URL('http://example.com/path?a=1#top');
    u.protocol = 'https';
    u.hostname = 'EXAMPLE.org';
    u.port = '8443';
    u.pathname = '/new path';
    u.search = '?b=2&c=ü';
    u.hash = 'bottom';
    u.username = 'me';
    u.password = 'p@ss';
    out.push(u.href);
    u.port = '443';
    out.push(u.host);
    out.push(URL.canParse('http://x'), URL.canParse('nope'), URL.canParse('/p', 'http://h'));
    return Response.json(out);
  },
};

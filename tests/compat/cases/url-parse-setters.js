/* compat
[{"path": "/p?x=1&y=2"}]
*/
// URL.parse / URL.canParse, searchParams linkage with the URL, setters,
// origins and URLSearchParams' two-argument has/delete, size and sort.
const out = {};
function t(name, fn) {
  try {
    out[name] = fn();
  } catch (err) {
    out[name] = { name: err.name };
  }
}

export default {
  async fetch(request) {
    t('parse', () => [URL.parse('https://a/b')?.href, URL.parse('nope'), URL.parse('/x', 'https://h/y/z')?.href,
      URL.parse('x', 'bad base'), URL.parse('https://a/', undefined)?.href]);
    t('canParse', () => [URL.canParse('https://a'), URL.canParse('a'), URL.canParse('a', 'https://b/'),
      URL.canParse('https://a', 'garbage'), URL.canParse(''), URL.canParse(new URL('https://z/'))]);
    t('parseIdentity', () => { const u = URL.parse('https://a/'); return [u instanceof URL, u !== URL.parse('https://a/')]; });
    t('linkage', () => {
      const u = new URL(request.url);
      const sp = u.searchParams;
      sp.append('z', 'a b');
      const afterAppend = u.search;
      u.search = '?q=1';
      const afterSet = [...sp];
      u.href = 'https://h/?r=2#f';
      const afterHref = [...sp];
      sp.delete('r');
      return [afterAppend, afterSet, afterHref, u.href, sp === u.searchParams];
    });
    t('emptySearch', () => { const u = new URL('https://h/?a=1'); u.searchParams.delete('a'); return [u.href, u.search]; });
    t('setters', () => {
      const u = new URL('https://user:pw@example.com:8080/a/b?c#d');
      const steps = [];
      u.protocol = 'http'; steps.push(u.href);
      u.port = '80'; steps.push(u.href);
      u.host = 'other.org:81'; steps.push(u.href);
      u.hostname = 'ÄÖ.de'; steps.push(u.href);
      u.pathname = '/x y/%2F'; steps.push(u.href);
      u.hash = ''; steps.push(u.href);
      u.username = 'a@b'; steps.push(u.href);
      u.password = ''; steps.push(u.href);
      u.protocol = 'ftp'; steps.push(u.href);
      u.protocol = 'foo'; steps.push(u.href);
      return steps;
    });
    t('origins', () => ['https://a.b:443/', 'http://a:8080', 'blob:https://x.org/uuid', 'data:text/plain,hi', 'file:///tmp',
      'ws://h', 'foo://bar/baz', 'https://[::1]:1/'].map((s) => new URL(s).origin));
    t('idna', () => ['https://xn--nxasmq6b.com/', 'https://faß.de/', 'https://EXAMPLE.com./', 'https://0x7f.1/', 'https://1.2.3/']
      .map((s) => { try { return new URL(s).host; } catch (e) { return e.name; } }));
    t('toJSON', () => [new URL('https://a/b c').toJSON(), JSON.stringify({ u: new URL('https://a') })]);
    t('paramsSize', () => { const p = new URLSearchParams('a=1&a=2&b=3'); const s1 = p.size; p.delete('a'); return [s1, p.size]; });
    t('paramsHasValue', () => { const p = new URLSearchParams('a=1&a=2'); return [p.has('a', '2'), p.has('a', '3'), p.has('a', undefined), p.has('b')]; });
    t('paramsDeleteValue', () => { const p = new URLSearchParams('a=1&b=1&a=2&a=1'); p.delete('a', '1'); const s = p.toString(); p.delete('a', undefined); return [s, p.toString()]; });
    t('paramsSortStable', () => { const p = new URLSearchParams('z=1&a=2&z=0&a=1&\uFFFD=x&\u00e9=y&e=z'); p.sort(); return p.toString(); });
    t('paramsSortSurrogates', () => { const p = new URLSearchParams([['\u{1F600}', '1'], ['\uFFFF', '2'], ['a', '3']]); p.sort(); return [...p.keys()].map((k) => k.codePointAt(0)); });
    t('paramsEncode', () => new URLSearchParams([['a b', 'c+d'], ['é', '\u0000'], ['*-._', '~!\'()']]).toString());
    t('paramsDecode', () => [...new URLSearchParams('a=%zz&b=%41%&c=+&%=1&=2&&d')]);
    t('paramsFromRecordOrder', () => new URLSearchParams({ b: '1', a: '2', 1: 'num' }).toString());
    t('paramsForEach', () => { const seen = []; new URLSearchParams('a=1&b=2').forEach((v, k, p) => seen.push([k, v, p instanceof URLSearchParams])); return seen; });
    t('paramsMutateIter', () => { const p = new URLSearchParams('a=1&b=2&c=3'); const seen = []; for (const [k] of p) { seen.push(k); if (k === 'a') p.delete('a'); } return seen; });
    t('paramsBadPair', () => new URLSearchParams([['a', 'b', 'c']]));
    t('paramsFromParams', () => { const a = new URLSearchParams('x=1'); const b = new URLSearchParams(a); b.append('y', '2'); return [a.toString(), b.toString()]; });
    t('urlStringify', () => [String(new URL('HTTPS://A.COM:443/./b/../c/%7e?#')), new URL('https://a/%7E%7e').pathname]);
    t('relative', () => [new URL('//h2/p', 'https://h/q').href, new URL('?x', 'https://h/a/b?y#z').href, new URL('#f', 'https://h/a?b').href,
      new URL('../../..', 'https://h/a/b/c').href, new URL('\\\\h3\\p', 'https://h/').href]);
    t('invalid', () => ['https://a b/', 'http://[1::2::3]/', 'https://a:99999/', 'https://%zz/', ''].map((s) => { try { return new URL(s).href; } catch (e) { return e.name; } }));
    t('opaque', () => { const u = new URL('mailto:Joe@Example.COM?subject=hi'); return [u.pathname, u.search, u.host, u.origin, u.protocol]; });
    return Response.json(out);
  },
};

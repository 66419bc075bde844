/* compat
[{"path": "/"}]
*/
// new Request(): method normalisation, headers, bodies and the checks.
function attempt(fn) {
  try {
    return fn();
  } catch (err) {
    return `throws ${err.name}`;
  }
}

export default {
  async fetch() {
    const out = {};
    const r = new Request('https://example.com/a?b#c', {
      method: 'post', headers: { 'X-A': '1' }, body: 'data', redirect: 'manual',
    });
    out.props = [r.method, r.url, r.headers.get('x-a'), r.headers.get('content-type'), r.redirect, await r.text()];
    for (const m of ['get', 'Patch', 'delete', 'options', 'head', 'put', 'purge', 'propfind']) {
      out[`method ${m}`] = attempt(() => new Request('https://x/', { method: m }).method);
    }
    out.getBody = attempt(() => new Request('https://x/', { body: 'x' }));
    out.badMethod = attempt(() => new Request('https://x/', { method: 'BAD METHOD' }));
    out.badUrl = attempt(() => new Request('/relative'));
    out.fromRequest = attempt(() => {
      const base = new Request('https://x/p', { method: 'PUT', headers: { a: '1' } });
      const derived = new Request(base, { headers: { b: '2' } });
      return [derived.method, derived.url, [...derived.headers]];
    });
    out.signal = typeof new Request('https://x/').signal.aborted;
    out.urlObject = new Request(new URL('https://example.com/u')).url;
    return Response.json(out);
  },
};

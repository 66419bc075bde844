/* compat
[{"path": "/"}]
*/
// Request's cache member: "no-store" is kept (and copied by new Request and
// clone()); every other mode is a TypeError (only its type is compared).
export default {
  fetch() {
    const out = {};
    out.unset = new Request('https://example.com/').cache ?? 'undefined';
    const r = new Request('https://example.com/', { cache: 'no-store' });
    out.noStore = r.cache;
    out.copied = new Request(r).cache;
    out.cloned = r.clone().cache;
    for (const mode of ['default', 'no-cache', 'reload', 'force-cache', 'only-if-cached', 'bogus']) {
      try {
        out[mode] = new Request('https://example.com/', { cache: mode }).cache ?? 'undefined';
      } catch (err) {
        out[mode] = err.name;
      }
    }
    return Response.json(out);
  },
};

/* compat
[{"path": "/?b=2&a=1&a=3&c=%20x+y&d=%E2%82%AC&e"}]
*/
// URLSearchParams: parsing, mutation, sorting and serialisation.
export default {
  fetch(request) {
    const p = new URL(request.url).searchParams;
    const out = { initial: [...p], get: p.get('a'), getAll: p.getAll('a'), has: p.has('e'), size: p.size };
    p.append('z', 'a&b=c');
    p.set('a', 'one');
    p.delete('b');
    p.sort();
    out.afterMutation = p.toString();
    out.fromRecord = new URLSearchParams({ x: '1', 'y z': '2 3' }).toString();
    out.fromPairs = new URLSearchParams([['k', 'v'], ['k', 'w']]).toString();
    out.fromString = new URLSearchParams('?q=%26&r=+%2B').toString();
    out.keys = [...new URLSearchParams('a=1&b=2&a=3').keys()];
    out.deleteValue = (() => { const s = new URLSearchParams('a=1&a=2&b=1'); s.delete('a', '2'); return s.toString(); })();
    out.hasValue = new URLSearchParams('a=1').has('a', '2');
    out.special = new URLSearchParams({ s: '~!*()\'-._' }).toString();
    return Response.json(out);
  },
};

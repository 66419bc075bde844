/* compat
[{"path": "/"}]
*/
// Which header names and values are accepted.
function attempt(fn) {
  try {
    return fn();
  } catch (err) {
    return `throws ${err.name}`;
  }
}

export default {
  fetch() {
    const out = {};
    const names = ['ok-name', 'with space', 'colon:', 'tab\t', 'a@b', '!#$%&\'*+-.^_`|~', '(paren)', 'x"y'];
    for (const n of names) out[`name:${n}`] = attempt(() => new Headers([[n, 'v']]).has(n));
    const values = ['plain', ' padded ', 'new\nline', 'cr\rx', 'nul\0x', 'tab\tinside', 'ünïcödé', '\u0100'];
    for (const v of values) out[`value:${JSON.stringify(v)}`] = attempt(() => new Headers({ x: v }).get('x'));
    out.badInit = attempt(() => new Headers([['only-one']]));
    out.record = attempt(() => [...new Headers({ B: '2', a: '1' })]);
    out.fromHeaders = attempt(() => [...new Headers(new Headers({ c: '3' }))]);
    out.getAllCookie = attempt(() => { const h = new Headers(); h.append('set-cookie', 'a'); return h.getAll ? h.getAll('set-cookie') : 'none'; });
    return Response.json(out);
  },
};

/* compat
[{"path": "/"}]
*/
// structuredClone of nested data, cycles, and what cannot be cloned.
export default {
  fetch() {
    const inner = { n: 1, list: [1, 'two', { three: 3 }] };
    const value = {
      inner,
      again: inner,
      date: new Date(0),
      re: /ab+c/gi,
      map: new Map([['k', { v: 1 }], [2, 'two']]),
      set: new Set([1, 'x', inner]),
      bytes: new Uint8Array([1, 2, 3]),
      big: 12345678901234567890n,
      nested: [[[[['deep']]]]],
      undef: undefined,
      nan: NaN,
      negZero: -0,
      err: new RangeError('cloned error'),
    };
    value.self = value;
    const c = structuredClone(value);
    const out = {
      distinct: c !== value && c.inner !== inner,
      sharedKept: c.inner === c.again,
      cycle: c.self === c,
      date: c.date instanceof Date && c.date.getTime(),
      re: [c.re.source, c.re.flags],
      map: [...c.map.entries()],
      setHasInner: c.set.has(c.inner),
      bytes: [...c.bytes],
      big: String(c.big),
      nested: c.nested[0][0][0][0][0],
      undef: 'undef' in c && c.undef === undefined,
      nan: Number.isNaN(c.nan),
      negZero: Object.is(c.negZero, -0),
      err: [c.err instanceof RangeError, c.err.message],
    };
    const ab = new ArrayBuffer(8);
    const moved = structuredClone(ab, { transfer: [ab] });
    out.transfer = [ab.byteLength, moved.byteLength];
    for (const [name, v] of [['function', () => 1], ['symbol', Symbol('s')], ['weakmap', new WeakMap()]]) {
      try {
        structuredClone(v);
        out[name] = 'cloned';
      } catch (err) {
        out[name] = err.name;
      }
    }
    return Response.json(out);
  },
};

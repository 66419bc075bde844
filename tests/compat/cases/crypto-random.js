/* compat
[{"path": "/"}]
*/
// getRandomValues and randomUUID: shapes and errors (values are random).
export default {
  fetch() {
    const out = {};
    const a = new Uint32Array(8);
    out.same = crypto.getRandomValues(a) === a;
    out.nonZero = a.some((v) => v !== 0);
    out.uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID());
    out.distinct = crypto.randomUUID() !== crypto.randomUUID();
    for (const [name, make] of [['float', () => new Float32Array(4)], ['big', () => new Uint8Array(65537)],
      ['max', () => new Uint8Array(65536)], ['bigint', () => new BigInt64Array(2)], ['dataview', () => new DataView(new ArrayBuffer(4))]]) {
      try {
        out[name] = crypto.getRandomValues(make()).byteLength;
      } catch (err) {
        out[name] = err.name;
      }
    }
    out.types = [typeof crypto, typeof crypto.subtle, Object.prototype.toString.call(crypto), Object.prototype.toString.call(crypto.subtle)];
    return Response.json(out);
  },
};

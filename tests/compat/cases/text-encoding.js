/* compat
[{"path": "/"}]
*/
// TextEncoder: encode, encodeInto, lone surrogates.
export default {
  fetch() {
    const enc = new TextEncoder();
    const out = {
      encoding: enc.encoding,
      ascii: [...enc.encode('hi')],
      multi: [...enc.encode('é€😀')],
      lone: [...enc.encode('a\ud800b')],
      empty: enc.encode().length,
      undef: [...enc.encode(undefined)],
    };
    const dest = new Uint8Array(5);
    out.into = enc.encodeInto('a€😀', dest);
    out.intoBytes = [...dest];
    out.intoExact = enc.encodeInto('€', new Uint8Array(3));
    return Response.json(out);
  },
};

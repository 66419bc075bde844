/* compat
[{"path": "/"}]
*/
// atob and btoa, including the errors and forgiving decoding.
function attempt(fn) {
  try {
    return fn();
  } catch (err) {
    return `throws ${err.name} ${err.code}`;
  }
}

export default {
  fetch() {
    const out = {};
    for (const s of ['', 'f', 'fo', 'foo', 'foob', 'fooba', 'foobar', '\u00ff\u00fe', '\u0100']) {
      out[`btoa ${JSON.stringify(s)}`] = attempt(() => btoa(s));
    }
    for (const s of ['', 'Zg==', 'Zg', 'Zm9v', ' Zm 9v\n', 'Zg=', 'Z', '@@@@', 'Zm9vYmFy', '//79', 'Zh==']) {
      out[`atob ${JSON.stringify(s)}`] = attempt(() => [...atob(s)].map((c) => c.charCodeAt(0)));
    }
    out.nonString = btoa(12345);
    out.roundtrip = atob(btoa(String.fromCharCode(...Array.from({ length: 256 }, (_, i) => i)))).length;
    return Response.json(out);
  },
};

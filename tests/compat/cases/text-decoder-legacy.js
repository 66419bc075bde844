/* compat
[{"path": "/"}]
*/
// The legacy single-byte encodings of the Encoding Standard, by label, over
// every byte value.
const labels = ['ibm866', 'iso-8859-2', 'latin3', 'iso-8859-4', 'cyrillic', 'arabic', 'greek', 'hebrew', 'logical',
  'latin6', 'iso-8859-13', 'iso-8859-14', 'l9', 'iso-8859-16', 'koi8', 'koi8-u', 'mac', 'tis-620', 'cp1250',
  'windows-1251', 'x-cp1253', 'latin5', 'windows-1255', 'cp1256', 'windows-1257', 'cp1258', 'x-mac-ukrainian',
  'x-user-defined'];
const allBytes = new Uint8Array(256).map((_, i) => i);

export default {
  fetch() {
    const out = {};
    for (const label of labels) {
      try {
        const d = new TextDecoder(label);
        const fatal = new TextDecoder(label, { fatal: true });
        let strict;
        try {
          strict = fatal.decode(allBytes).length;
        } catch (err) {
          strict = err.name;
        }
        out[label] = [d.encoding, d.decode(allBytes), strict];
      } catch (err) {
        out[label] = err.name;
      }
    }
    return Response.json(out);
  },
};

/* compat
[{"path": "/"}]
*/
// TextDecoder: labels, utf-16le, latin1, fatal, ignoreBOM, streaming.
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
    for (const label of ['utf-8', 'UTF8', ' unicode-1-1-utf-8 ', 'utf-16le', 'utf-16', 'latin1',
      'iso-8859-1', 'ascii', 'us-ascii', 'windows-1252', 'bogus']) {
      out[`label ${label}`] = attempt(() => new TextDecoder(label).encoding);
    }
    out.utf8 = new TextDecoder().decode(new Uint8Array([0xe2, 0x82, 0xac, 0x41]));
    out.replacement = new TextDecoder().decode(new Uint8Array([0x61, 0xff, 0x62, 0xc3]));
    out.fatal = attempt(() => new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array([0xff])));
    out.bom = new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x78]));
    out.keepBom = new TextDecoder('utf-8', { ignoreBOM: true }).decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x78])).length;
    out.utf16 = new TextDecoder('utf-16le').decode(new Uint8Array([0x3d, 0xd8, 0x00, 0xde, 0x41, 0x00]));
    out.latin1 = new TextDecoder('latin1').decode(new Uint8Array([0x80, 0xe9, 0x9f, 0xff]));
    const d = new TextDecoder();
    out.stream = [d.decode(new Uint8Array([0xf0, 0x9f]), { stream: true }), d.decode(new Uint8Array([0x98, 0x80]), { stream: true }), d.decode()];
    out.props = [d.fatal, d.ignoreBOM, new TextDecoder('utf-8', { fatal: true }).fatal];
    out.views = [new TextDecoder().decode(new Uint16Array([0x6968])), new TextDecoder().decode(new DataView(new Uint8Array([0x6f, 0x6b]).buffer))];
    return Response.json(out);
  },
};

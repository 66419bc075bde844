/* compat
[{"path": "/"}]
*/
// TextDecoder streaming across chunk splits, fatal and ignoreBOM, encodeInto
// with small destinations and lone surrogates, atob/btoa edge cases.
const out = {};
function t(name, fn) {
  try {
    out[name] = fn();
  } catch (err) {
    out[name] = { name: err.name };
  }
}
const cps = (s) => [...s].map((c) => c.codePointAt(0).toString(16));

export default {
  async fetch() {
    const euro = [0xe2, 0x82, 0xac];
    const smile = [0xf0, 0x9f, 0x98, 0x80];
    t('splitEveryByte', () => {
      const d = new TextDecoder();
      let s = '';
      for (const b of [...euro, ...smile, 0x41]) s += d.decode(new Uint8Array([b]), { stream: true });
      return cps(s + d.decode());
    });
    t('truncatedAtEnd', () => { const d = new TextDecoder(); return cps(d.decode(new Uint8Array([0x41, 0xe2, 0x82]), { stream: true }) + d.decode()); });
    t('truncatedFatal', () => { const d = new TextDecoder('utf-8', { fatal: true }); d.decode(new Uint8Array([0xe2, 0x82]), { stream: true }); return d.decode(); });
    t('fatalInvalid', () => new TextDecoder('utf-8', { fatal: true }).decode(new Uint8Array([0xc0, 0x80])));
    t('fatalResetsAfterError', () => {
      const d = new TextDecoder('utf-8', { fatal: true });
      try { d.decode(new Uint8Array([0xff])); } catch (e) { /* expected */ }
      return d.decode(new Uint8Array([0x41]));
    });
    t('replacementCounts', () => cps(new TextDecoder().decode(new Uint8Array([0xf0, 0x9f, 0x41, 0xed, 0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80, 0xc2]))));
    t('bomDefault', () => cps(new TextDecoder().decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x61]))));
    t('bomIgnore', () => cps(new TextDecoder('utf-8', { ignoreBOM: true }).decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x61]))));
    t('bomSplit', () => { const d = new TextDecoder(); return cps(d.decode(new Uint8Array([0xef, 0xbb]), { stream: true }) + d.decode(new Uint8Array([0xbf, 0x62]))); });
    t('bomOnlyOnceAcrossStream', () => { const d = new TextDecoder(); return cps(d.decode(new Uint8Array([0xef, 0xbb, 0xbf]), { stream: true }) + d.decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x63]))); });
    t('bomAfterReset', () => { const d = new TextDecoder(); d.decode(new Uint8Array([0x61])); return cps(d.decode(new Uint8Array([0xef, 0xbb, 0xbf, 0x64]))); });
    t('utf16le', () => { const d = new TextDecoder('utf-16le'); return cps(d.decode(new Uint8Array([0xff, 0xfe, 0x41, 0x00, 0x3d, 0xd8]), { stream: true }) + d.decode(new Uint8Array([0x00, 0xde])) + d.decode(new Uint8Array([0x42]))); });
    t('utf16be', () => cps(new TextDecoder('utf-16be').decode(new Uint8Array([0xfe, 0xff, 0x00, 0x41, 0xd8, 0x00]))));
    t('props', () => { const d = new TextDecoder('UTF8', { fatal: 1, ignoreBOM: 'yes' }); return [d.encoding, d.fatal, d.ignoreBOM]; });
    t('labels', () => ['unicode-1-1-utf-8', ' utf-8\n', 'latin1', 'ascii', 'utf-16', 'x-user-defined', 'replacement', 'iso-2022-kr', 'bogus']
      .map((l) => { try { return new TextDecoder(l).encoding; } catch (e) { return e.name; } }));
    t('decodeInputs', () => {
      const d = new TextDecoder();
      const buf = new TextEncoder().encode('xyz').buffer;
      return [d.decode(), d.decode(undefined), d.decode(buf), d.decode(new DataView(buf, 1)), d.decode(new Uint16Array(buf.slice(0, 2)))];
    });
    t('decodeBadInput', () => new TextDecoder().decode('string'));
    t('decodeNull', () => new TextDecoder().decode(null));
    t('encode', () => [[...new TextEncoder().encode('\uD800x')], [...new TextEncoder().encode()], [...new TextEncoder().encode(null)], new TextEncoder().encoding]);
    t('encodeInto', () => {
      const e = new TextEncoder();
      const res = [];
      for (const [s, n] of [['abc', 2], ['€uro', 2], ['€uro', 3], ['\u{1F600}!', 3], ['\u{1F600}!', 4], ['\uD800a', 4], ['', 0], ['x', 0]]) {
        const dst = new Uint8Array(n);
        const r = e.encodeInto(s, dst);
        res.push([s.length, n, r.read, r.written, [...dst], Object.keys(r)]);
      }
      return res;
    });
    t('encodeIntoSubarray', () => { const buf = new Uint8Array(6).fill(9); const r = new TextEncoder().encodeInto('hi', buf.subarray(2, 5)); return [r, [...buf]]; });
    t('encodeIntoBadDest', () => new TextEncoder().encodeInto('a', new Uint16Array(2)));
    t('encodeIntoArrayBuffer', () => new TextEncoder().encodeInto('a', new ArrayBuffer(2)));
    t('atobWhitespace', () => [atob(' YW J j\n\t'), atob('YQ'), atob('YQ='), atob('YQ=='), atob('')]);
    t('atobBadPadding', () => ['YQ===', 'Y', 'YQ=a', '=YQ', 'YW=Jj', 'YR==', 'Y\fQ'].map((s) => { try { return [...atob(s)].map((c) => c.charCodeAt(0)); } catch (e) { return [e.name, e.code]; } }));
    t('atobInvalid', () => ['Y-Q', 'YQ_', 'é', '\u00a0YQ'].map((s) => { try { return atob(s); } catch (e) { return [e.name, e.code]; } }));
    t('atobCoerce', () => [atob(null), atob(undefined).length, atob(1234)].map((s) => [...s].map((c) => c.charCodeAt(0))));
    t('btoa', () => [btoa(''), btoa('\u00ff\u00fe'), btoa(null), btoa(undefined), btoa(12)]);
    t('btoaWide', () => btoa('\u0100'));
    t('btoaWideMessage', () => { try { btoa('€'); } catch (e) { return [e.name, e.code, e instanceof DOMException]; } });
    t('atobNoArg', () => atob());
    t('streamDecoderSplit', async () => 'skip');
    return Response.json(out);
  },
};

/* compat
[{"path": "/"}]
*/
// The legacy multi-byte encodings (Shift_JIS, EUC-JP, ISO-2022-JP, GBK,
// gb18030, Big5, EUC-KR): workerd decodes them through ICU, edgenode does
// not have them yet (RangeError, as for an unknown label).
export default {
  fetch() {
    const out = {};
    for (const label of ['shift_jis', 'euc-jp', 'iso-2022-jp', 'gbk', 'gb18030', 'big5', 'euc-kr']) {
      try {
        out[label] = new TextDecoder(label).decode(new Uint8Array([0x41, 0xa4, 0xa2]));
      } catch (err) {
        out[label] = err.name;
      }
    }
    return Response.json(out);
  },
};

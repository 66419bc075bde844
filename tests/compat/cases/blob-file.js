/* compat
[{"path": "/"}]
*/
// Blob and File: parts, slicing, types, reading.
export default {
  async fetch() {
    const b = new Blob(['abc', new Uint8Array([100, 101]), new Blob(['fgh'])], { type: 'Text/Plain' });
    const out = {
      size: b.size, type: b.type, text: await b.text(),
      slice: await b.slice(1, -1).text(), sliceNeg: await b.slice(-3).text(),
      sliceType: b.slice(0, 1, 'application/X-Y').type,
      bytes: [...new Uint8Array(await b.slice(2, 5).arrayBuffer())],
      badType: new Blob([], { type: 'a\u0001b' }).type,
      empty: new Blob().size,
    };
    const f = new File(['data'], 'name.txt', { type: 'text/plain', lastModified: 1700000000000 });
    out.file = [f.name, f.size, f.type, f.lastModified, f instanceof Blob, await f.text()];
    const chunks = [];
    const reader = b.stream().getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) chunks.push(...r.value);
    out.stream = chunks;
    out.tag = Object.prototype.toString.call(b);
    return Response.json(out);
  },
};

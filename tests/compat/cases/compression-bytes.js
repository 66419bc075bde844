/* compat
[{"path": "/"}, {"method": "POST", "path": "/echo-gzip", "chunks": ["first part of the body, ", "second part, ", "and the end"]}]
*/
// The exact bytes CompressionStream produces: they depend on the zlib build
// (workerd's Chromium zlib finds other matches than Debian's zlib); both are
// valid streams of the same data.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');

export default {
  async fetch(request) {
    if (new URL(request.url).pathname === '/echo-gzip') {
      return new Response(request.body.pipeThrough(new CompressionStream('gzip')), {
        headers: { 'content-type': 'application/octet-stream' },
      });
    }
    const data = new TextEncoder().encode('first part of the body, second part, and the end '.repeat(20));
    const out = {};
    for (const format of ['gzip', 'deflate', 'deflate-raw']) {
      const compressed = await new Response(new Blob([data]).stream().pipeThrough(new CompressionStream(format))).arrayBuffer();
      out[format] = hex(compressed);
    }
    return Response.json(out);
  },
};

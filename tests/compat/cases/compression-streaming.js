/* compat
[{"path": "/"}]
*/
// Compression over many chunks and a megabyte of data, and decompression fed
// in small pieces. (The compressed bytes themselves depend on the zlib
// build: see compression-bytes.)
function chunked(bytes, size) {
  let at = 0;
  return new ReadableStream({
    pull(c) {
      if (at >= bytes.length) {
        c.close();
        return;
      }
      c.enqueue(bytes.slice(at, at + size));
      at += size;
    },
  });
}

export default {
  async fetch() {
    const data = new Uint8Array(1 << 20);
    let x = 12345;
    for (let i = 0; i < data.length; i++) {
      x = (x * 1103515245 + 12345) >>> 0;
      data[i] = (x >>> 24) % 16 + 97; // compressible, not trivial
    }
    const out = {};
    for (const format of ['gzip', 'deflate', 'deflate-raw']) {
      const compressed = new Uint8Array(await new Response(chunked(data, 7000).pipeThrough(new CompressionStream(format))).arrayBuffer());
      const back = new Uint8Array(await new Response(chunked(compressed, 61).pipeThrough(new DecompressionStream(format))).arrayBuffer());
      out[format] = [compressed.length < data.length / 40, back.length === data.length && back.every((b, i) => b === data[i])];
    }
    return Response.json(out);
  },
};

/* compat
[{"path": "/gzip"}, {"path": "/deflate"}, {"path": "/deflate-raw"}, {"method": "POST", "path": "/inflate", "bodyBase64": "H4sIAAAAAAAAA8tIzcnJVyjPL8pJAQCFEUoNCwAAAA=="}]
*/
// CompressionStream and DecompressionStream: exact bytes both ways.
const text = 'hello world '.repeat(50);

async function collect(stream) {
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

export default {
  async fetch(request) {
    const format = new URL(request.url).pathname.slice(1);
    if (format === 'inflate') {
      return new Response(request.body.pipeThrough(new DecompressionStream('gzip')));
    }
    const input = new Blob([text]).stream();
    const compressed = await collect(input.pipeThrough(new CompressionStream(format)));
    const back = await new Response(new Blob([compressed]).stream().pipeThrough(new DecompressionStream(format))).text();
    return Response.json({ size: compressed.length, bytes: [...compressed], roundTrip: back === text });
  },
};

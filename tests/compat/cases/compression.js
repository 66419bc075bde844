/* compat
[{"path": "/gzip"}, {"path": "/deflate"}, {"path": "/deflate-raw"}, {"method": "POST", "path": "/inflate", "bodyBase64": "H4sIAAAAAAAAA8tIzcnJVyjPL8pJAQCFEUoNCwAAAA=="}]
*/
// CompressionStream and DecompressionStream: round trips in every format,
// and a gzip request body inflated into the response.
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
    const header = format === 'gzip' ? [...compressed.subarray(0, 10)] : format === 'deflate' ? [...compressed.subarray(0, 2)] : [];
    return Response.json({ smaller: compressed.length < text.length / 4, header, roundTrip: back === text });
  },
};

/* compat
[{"path": "/"}]
*/
// Decompressing bad data, truncated data, and unknown formats.
async function attempt(fn) {
  try {
    return await fn();
  } catch (err) {
    return `throws ${err.name}`;
  }
}

function inflate(bytes, format = 'gzip') {
  return new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream(format))).text();
}

export default {
  async fetch() {
    const gz = new Uint8Array(await new Response(new Blob(['payload']).stream().pipeThrough(new CompressionStream('gzip'))).arrayBuffer());
    return Response.json({
      ok: await attempt(() => inflate(gz)),
      garbage: await attempt(() => inflate(new Uint8Array([1, 2, 3, 4, 5]))),
      truncated: await attempt(() => inflate(gz.subarray(0, gz.length - 4))),
      trailing: await attempt(() => inflate(new Uint8Array([...gz, 1, 2, 3]))),
      wrongFormat: await attempt(() => inflate(gz, 'deflate')),
      unknown: await attempt(() => new CompressionStream('brotli')),
    });
  },
};

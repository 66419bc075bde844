/* compat
[{"method": "POST", "path": "/", "body": "bytes please"}]
*/
// bytes() on Request, Response and Blob returns a Uint8Array.
export default {
  async fetch(request) {
    const fromRequest = await request.bytes();
    const fromResponse = await new Response('abc').bytes();
    const fromBlob = await new Blob(['xyz']).bytes();
    return Response.json({
      request: [fromRequest instanceof Uint8Array, fromRequest.length],
      response: [fromResponse instanceof Uint8Array, [...fromResponse]],
      blob: [fromBlob instanceof Uint8Array, [...fromBlob]],
    });
  },
};

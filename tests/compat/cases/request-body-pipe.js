/* compat
[{"method": "POST", "path": "/", "chunks": ["alpha ", "beta ", "gamma"]},
 {"method": "POST", "path": "/", "body": "direct body"}]
*/
// The request body streamed straight into the response through a transform.
export default {
  fetch(request) {
    const upper = new TransformStream({
      transform(chunk, controller) {
        controller.enqueue(new TextEncoder().encode(new TextDecoder().decode(chunk).toUpperCase()));
      },
    });
    return new Response(request.body.pipeThrough(upper), { headers: { 'content-type': 'text/plain' } });
  },
};

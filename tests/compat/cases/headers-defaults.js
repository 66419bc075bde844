/* compat
[{"path": "/string"}, {"path": "/json"}, {"path": "/bytes"}, {"path": "/blob"}, {"path": "/blob-typed"},
 {"path": "/params"}, {"path": "/override"}, {"path": "/empty"}]
*/
// The Content-Type each kind of body implies, as it reaches the client.
export default {
  fetch(request) {
    switch (new URL(request.url).pathname) {
      case '/string': return new Response('text');
      case '/json': return Response.json({ a: 1 });
      case '/bytes': return new Response(new Uint8Array([1, 2, 3]));
      case '/blob': return new Response(new Blob(['x']));
      case '/blob-typed': return new Response(new Blob(['<b>'], { type: 'Text/HTML' }));
      case '/params': return new Response(new URLSearchParams('a=1&b=2'));
      case '/override': return new Response('x', { headers: { 'Content-Type': 'application/custom' } });
      default: return new Response(null);
    }
  },
};

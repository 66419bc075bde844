/* compat
[{"path": "/error-headers"}, {"path": "/custom-method"}, {"path": "/event-detail"},
 {"path": "/rejection-event"}]
*/
// Where edgenode keeps to the standards and workerd does not: Response.error()
// has immutable headers, a request method need only be a token (workerd
// accepts only the methods it knows), CustomEvent's detail defaults to null,
// and PromiseRejectionEvent can be constructed (workerd: TypeError).
export default {
  fetch(request) {
    const what = new URL(request.url).pathname;
    try {
      if (what === '/event-detail') return new Response(String(new CustomEvent('e').detail));
      if (what === '/rejection-event') {
        const p = Promise.resolve();
        return new Response(new PromiseRejectionEvent('unhandledrejection', { promise: p, reason: 1 }).type);
      }
      if (what === '/error-headers') {
        Response.error().headers.set('x', '1');
        return new Response('mutable');
      }
      return new Response(new Request('https://x/', { method: 'custom' }).method);
    } catch (err) {
      return new Response(`throws ${err.name}`);
    }
  },
};

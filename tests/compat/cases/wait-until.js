/* compat
[{"path": "/"}]
*/
// ctx.waitUntil does not hold back the response; its rejection is not the
// request's failure.
export default {
  fetch(request, env, ctx) {
    let done = false;
    ctx.waitUntil(new Promise((resolve) => setTimeout(() => { done = true; resolve(); }, 30)));
    ctx.waitUntil(Promise.reject(new Error('background failure')));
    return new Response(JSON.stringify({ done, hasPassThrough: typeof ctx.passThroughOnException, envType: typeof env }));
  },
};

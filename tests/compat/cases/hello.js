/* compat
[{"path": "/"}, {"path": "/other?x=1"}]
*/
export default {
  fetch(request) {
    return new Response(`hello from ${new URL(request.url).pathname}\n`);
  },
};

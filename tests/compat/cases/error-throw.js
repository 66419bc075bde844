/* compat
[{"path": "/sync"}, {"path": "/async"}]
*/
export default {
  async fetch(request) {
    if (new URL(request.url).pathname === '/sync') throw new Error('boom');
    await null;
    throw new TypeError('async boom');
  },
};

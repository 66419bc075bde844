/* compat
[{"path": "/"}, {"path": "/handled"}]
*/
// A rejection after a delay, and the same rejection caught by the handler.
export default {
  async fetch(request) {
    const late = new Promise((_, reject) => setTimeout(() => reject(new Error('too late')), 10));
    if (new URL(request.url).pathname === '/handled') {
      try {
        await late;
      } catch (err) {
        return new Response(`caught: ${err.message}`, { status: 502 });
      }
    }
    return late;
  },
};

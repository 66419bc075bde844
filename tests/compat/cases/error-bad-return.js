/* compat
[{"path": "/undefined"}, {"path": "/string"}, {"path": "/object"}]
*/
// fetch() returning something that is not a Response: a 500 on both.
export default {
  async fetch(request) {
    const what = new URL(request.url).pathname;
    if (what === '/undefined') return undefined;
    if (what === '/string') return 'just a string';
    return { status: 200, body: 'looks like a response' };
  },
};

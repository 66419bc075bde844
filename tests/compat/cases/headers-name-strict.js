/* compat
[{"path": "/"}]
*/
// Header names the Fetch standard rejects (not a token) but workerd lets by.
function attempt(fn) {
  try {
    return fn();
  } catch (err) {
    return `throws ${err.name}`;
  }
}

export default {
  fetch() {
    return Response.json({
      empty: attempt(() => new Headers([['', 'v']]).has('')),
      nonAscii: attempt(() => new Headers([['ünicode', 'v']]).has('ünicode')),
    });
  },
};

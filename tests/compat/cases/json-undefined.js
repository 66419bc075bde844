/* compat
[{"path": "/"}]
*/
// Response.json(undefined): the Fetch standard throws a TypeError (there is
// no JSON text for undefined); workerd answers anyway.
export default {
  fetch() {
    try {
      const r = Response.json(undefined);
      return new Response(`accepted: ${r.status}`);
    } catch (err) {
      return new Response(`throws ${err.name}`);
    }
  },
};

/* compat
[{"method": "POST", "path": "/", "headers": {"content-type": "application/json"}, "body": "{\"a\":1,\"b\":[true,null,\"x\"],\"c\":{\"d\":1.5e3}}"},
 {"method": "POST", "path": "/", "headers": {"content-type": "application/json"}, "body": "{\"emoji\":\"😀\",\"esc\":\"\\u00e9\\n\"}"},
 {"method": "POST", "path": "/", "headers": {"content-type": "application/json"}, "body": "[1,2,3]"}]
*/
// A JSON API: parse the body, transform it, answer JSON.
export default {
  async fetch(request) {
    const data = await request.json();
    return Response.json({ received: data, type: Array.isArray(data) ? 'array' : typeof data, keys: Object.keys(data) },
      { headers: { 'x-json': 'yes' } });
  },
};

/* compat
[{"method": "POST", "path": "/text", "body": "héllo wörld"},
 {"method": "PUT", "path": "/bytes", "bodyBase64": "AAEC/f7/"},
 {"method": "POST", "path": "/blob", "headers": {"content-type": "Text/Plain; charset=utf-8"}, "body": "typed"},
 {"method": "POST", "path": "/none"},
 {"method": "POST", "path": "/none", "body": ""},
 {"method": "GET", "path": "/get"}]
*/
// Reading request bodies as text, bytes and Blob.
export default {
  async fetch(request) {
    const kind = new URL(request.url).pathname.slice(1);
    const out = { method: request.method, hasBody: request.body !== null };
    if (kind === 'text') out.text = await request.text();
    if (kind === 'bytes') out.bytes = [...new Uint8Array(await request.arrayBuffer())];
    if (kind === 'blob') {
      const b = await request.blob();
      out.blob = [b.size, b.type, await b.text()];
    }
    if (kind === 'none' || kind === 'get') out.text = await request.text();
    return Response.json(out);
  },
};

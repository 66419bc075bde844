/* compat
[{"method": "POST", "path": "/", "headers": {"content-type": "application/x-www-form-urlencoded"}, "body": "name=ada+lovelace&lang=en&lang=fr&empty=&sym=%26%3D"},
 {"method": "POST", "path": "/", "headers": {"content-type": "multipart/form-data; boundary=XyZ"}, "body": "--XyZ\r\nContent-Disposition: form-data; name=\"field\"\r\n\r\nvalue one\r\n--XyZ\r\nContent-Disposition: form-data; name=\"upload\"; filename=\"notes.txt\"\r\nContent-Type: text/plain\r\n\r\nline1\r\nline2\r\n--XyZ--\r\n"},
 {"method": "POST", "path": "/", "headers": {"content-type": "text/plain"}, "body": "a=1"}]
*/
// request.formData() for urlencoded and multipart bodies.
export default {
  async fetch(request) {
    let fd;
    try {
      fd = await request.formData();
    } catch (err) {
      return new Response(`formData failed: ${err.name}`, { status: 400 });
    }
    const out = [];
    for (const [name, value] of fd) {
      if (typeof value === 'string') out.push([name, value]);
      else out.push([name, 'file', value.name, value.type, value.size, await value.text()]);
    }
    return Response.json(out);
  },
};

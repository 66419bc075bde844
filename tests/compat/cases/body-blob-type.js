/* compat
[{"path": "/"}]
*/
// A body's blob() has the Content-Type as MIME types serialise: type and
// parameter names lowercased, parameter values as they were.
export default {
  async fetch() {
    const types = ['Text/HTML; Charset=UTF-8', 'application/JSON', 'text/plain;a=B;A=c',
      'text/plain; name="Quoted Value"', 'not a type', ''];
    const out = [];
    for (const t of types) {
      const r = new Response('x', { headers: t === '' ? {} : { 'content-type': t } });
      const b = await r.blob();
      out.push([t, b.type, b.size]);
    }
    out.push(['new Blob', new Blob(['x'], { type: 'Text/HTML; Charset=UTF-8' }).type]);
    return Response.json(out);
  },
};

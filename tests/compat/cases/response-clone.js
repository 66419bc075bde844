/* compat
[{"path": "/"}]
*/
// clone(): both copies read the same bytes, for every kind of body.
export default {
  async fetch() {
    const out = {};
    const sources = {
      text: () => new Response('hello'),
      bytes: () => new Response(new Uint8Array([104, 105])),
      stream: () => new Response(new ReadableStream({
        start(c) { c.enqueue(new TextEncoder().encode('str')); c.enqueue(new TextEncoder().encode('eam')); c.close(); },
      })),
      json: () => Response.json({ k: 'v' }),
    };
    for (const [name, make] of Object.entries(sources)) {
      const a = make();
      const b = a.clone();
      out[name] = [await a.text(), await b.text(), a.bodyUsed, b.bodyUsed, b.headers.get('content-type')];
    }
    const used = new Response('x');
    await used.text();
    try {
      used.clone();
      out.cloneUsed = 'ok';
    } catch (err) {
      out.cloneUsed = err.name;
    }
    const req = new Request('https://example.com/', { method: 'POST', body: 'payload' });
    const copy = req.clone();
    out.request = [await req.text(), await copy.text(), copy.method, copy.url];
    return Response.json(out);
  },
};

/* compat
[{"path": "/read"}, {"path": "/respond"}]
*/
// An erroring stream: what a reader sees, and a response whose stream errors.
export default {
  async fetch(request) {
    const failing = () => new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode('partial'));
        c.error(new RangeError('source broke'));
      },
    });
    if (new URL(request.url).pathname === '/read') {
      const reader = failing().getReader();
      const out = [];
      try {
        for (;;) {
          const r = await reader.read();
          if (r.done) break;
          out.push(r.value.length);
        }
      } catch (err) {
        out.push(err.name, err.message);
      }
      let cancelled = null;
      const s = new ReadableStream({ cancel(reason) { cancelled = reason; } });
      await s.cancel('bye');
      out.push(cancelled);
      try {
        s.getReader();
        s.getReader();
      } catch (err) {
        out.push(err.name);
      }
      return Response.json(out);
    }
    try {
      return new Response(await new Response(failing()).text());
    } catch (err) {
      return new Response(`text() failed: ${err.name}`, { status: 500 });
    }
  },
};

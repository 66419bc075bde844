/* compat
[{"path": "/201"}, {"path": "/299"}, {"path": "/404"}, {"path": "/599"}, {"path": "/range"}]
*/
// Status codes, statusText and the checks on them.
export default {
  fetch(request) {
    const p = new URL(request.url).pathname.slice(1);
    if (p === 'range') {
      const out = {};
      for (const s of [199, 200, 600, 0, 1000, 304]) {
        try {
          const r = new Response(null, { status: s });
          out[s] = [r.status, r.ok, r.statusText];
        } catch (err) {
          out[s] = err.name;
        }
      }
      try {
        new Response(null, { status: 200, statusText: 'bad\nline' });
        out.badText = 'ok';
      } catch (err) {
        out.badText = err.name;
      }
      return Response.json(out);
    }
    const r = new Response(`status ${p}\n`, { status: Number(p) });
    return new Response(JSON.stringify([r.status, r.ok, r.statusText, r.type, r.redirected, r.url]), { status: r.status });
  },
};

let seq = 0;
function code(body) {
  return { compatibilityDate: '2025-01-01', mainModule: 'child.js',
           modules: { 'child.js': body }, globalOutbound: null };
}
function childSource(tag) {
  return `export default { fetch(request) { return new Response(${JSON.stringify(tag)}); } };`;
}
// Unique code every time: nothing can be cached by source.
function unique() {
  seq++;
  return `cold ${seq} ${Math.random()}`;
}
function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    if (url.pathname === '/cold') {
      const stub = env.LOADER.load(code(childSource(unique())));
      return stub.getEntrypoint().fetch(request);
    }
    if (url.pathname === '/warm') {
      const stub = env.LOADER.get('warm', async () => code(childSource('warm')));
      return stub.getEntrypoint().fetch(request);
    }
    if (url.pathname === '/inproc') {
      const n = Number(url.searchParams.get('n') || 500);
      // gap: idle milliseconds before each load (outside the timed part)
      const gap = Number(url.searchParams.get('gap') || 0);
      const batch = 10;
      const means = [];
      let total = 0;
      for (let b = 0; b < n / batch; b++) {
        let spent = 0;
        for (let i = 0; i < batch; i++) {
          if (gap > 0) await new Promise((resolve) => setTimeout(resolve, gap));
          const c = code(childSource(unique()));
          const s = Date.now();
          const stub = env.LOADER.load(c);
          const res = await stub.getEntrypoint().fetch('http://child/');
          // The first byte: fetch() settles when the response's head is in.
          spent += Date.now() - s;
          await res.arrayBuffer();
        }
        means.push(spent / batch);
        total += spent;
      }
      const mean = total / (means.length * batch);
      means.sort((a, b) => a - b);
      return Response.json({ loads: means.length * batch, mean_ms: mean,
                             p50_ms: percentile(means, 50), p99_ms: percentile(means, 99) });
    }
    return new Response('routes: /cold /warm /inproc', { status: 404 });
  },
};

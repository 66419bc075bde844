/* compat
[{"path": "/"}]
*/
// scheduler.wait (a Workers API) and a request signal.
export default {
  async fetch(request) {
    const start = Date.now();
    await scheduler.wait(15);
    const waited = Date.now() - start >= 10;
    const ctl = new AbortController();
    const p = scheduler.wait(1000, { signal: ctl.signal }).then(() => 'finished', (err) => `rejected ${err.name}`);
    ctl.abort();
    return Response.json({ waited, aborted: await p, requestSignal: [typeof request.signal, request.signal.aborted] });
  },
};

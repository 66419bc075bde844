/* compat
[{"path": "/"}]
*/
// AbortSignal.timeout: fires with a TimeoutError after the delay.
export default {
  async fetch() {
    // (The clock read first: a process descheduled between the two would
    // otherwise start it late and see the timer fire "early".)
    const start = Date.now();
    const signal = AbortSignal.timeout(30);
    const before = signal.aborted;
    const reason = await new Promise((resolve) => {
      signal.addEventListener('abort', () => resolve(signal.reason));
    });
    const waited = Date.now() - start >= 25;
    return Response.json({ before, after: signal.aborted, name: reason.name, code: reason.code, waited });
  },
};

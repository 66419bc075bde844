/* compat
[{"path": "/"}]
*/
// AbortSignal.any: follows the first of its signals to abort.
export default {
  async fetch() {
    const a = new AbortController();
    const b = new AbortController();
    const any = AbortSignal.any([a.signal, b.signal]);
    const log = [];
    any.addEventListener('abort', () => log.push(`any: ${any.reason}`));
    b.abort('b first');
    a.abort('a second');
    const pre = AbortSignal.any([new AbortController().signal, AbortSignal.abort('pre')]);
    const nested = new AbortController();
    const chained = AbortSignal.any([AbortSignal.any([nested.signal])]);
    nested.abort('deep');
    const timed = AbortSignal.any([AbortSignal.timeout(10)]);
    await new Promise((resolve) => timed.addEventListener('abort', resolve));
    return Response.json({ log, reason: any.reason, pre: [pre.aborted, pre.reason], chained: chained.reason,
      timed: timed.reason.name, empty: AbortSignal.any([]).aborted });
  },
};

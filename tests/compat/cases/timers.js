/* compat
[{"path": "/"}]
*/
// setTimeout, setInterval, clearTimeout, queueMicrotask: what runs, in which
// order where the order is defined (timers of different delays may be
// reordered by a loaded machine, so only their sets are compared).
export default {
  async fetch() {
    const log = [];
    let intervals = 0;
    await Promise.all([
      new Promise((resolve) => {
        const id = setInterval(() => {
          intervals++;
          if (intervals === 3) {
            clearInterval(id);
            resolve();
          }
        }, 2);
      }),
      new Promise((resolve) => setTimeout(() => { log.push('timeout 20'); resolve(); }, 20)),
      new Promise((resolve) => {
        setTimeout(() => log.push('timeout 0'), 0);
        const cancelled = setTimeout(() => log.push('cancelled'), 5);
        clearTimeout(cancelled);
        setTimeout((a, b) => { log.push(`args ${a} ${b}`); resolve(); }, 1, 'x', 'y');
        queueMicrotask(() => log.push('microtask'));
        Promise.resolve().then(() => log.push('promise'));
        log.push('sync');
      }),
    ]);
    await new Promise((resolve) => setTimeout(resolve, 10));
    let threw;
    try {
      setTimeout('code string', 1);
    } catch (err) {
      threw = err.name;
    }
    return Response.json({
      first: log.slice(0, 3), later: log.slice(3).sort(), intervals,
      id: typeof setTimeout(() => {}, 1000), threw, clearUnknown: clearTimeout(123456) === undefined,
    });
  },
};

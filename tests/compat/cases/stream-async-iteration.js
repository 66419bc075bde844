/* compat
[{"path": "/"}]
*/
// for await over a ReadableStream, early exit, and values().
export default {
  async fetch() {
    const make = () => new ReadableStream({
      start(c) {
        for (let i = 0; i < 5; i++) c.enqueue(i);
        c.close();
      },
    });
    const all = [];
    for await (const v of make()) all.push(v);
    const s = make();
    const some = [];
    for await (const v of s) {
      some.push(v);
      if (v === 1) break;
    }
    const kept = make();
    const first = [];
    for await (const v of kept.values({ preventCancel: true })) {
      first.push(v);
      break;
    }
    const restReader = kept.getReader();
    const next = await restReader.read();
    return Response.json({ all, some, lockedAfterBreak: s.locked, first, next: next.value });
  },
};

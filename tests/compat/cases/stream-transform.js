/* compat
[{"path": "/"}]
*/
// TransformStream: a chain of transforms, flush, and controller.terminate.
export default {
  async fetch() {
    const source = () => new ReadableStream({
      start(c) {
        for (const w of ['alpha', 'beta', 'gamma', 'delta']) c.enqueue(w);
        c.close();
      },
    });
    const upper = new TransformStream({ transform(chunk, c) { c.enqueue(chunk.toUpperCase()); } });
    const count = (() => {
      let n = 0;
      return new TransformStream({
        transform(chunk, c) { n++; c.enqueue(`${n}:${chunk}`); },
        flush(c) { c.enqueue(`total=${n}`); },
      });
    })();
    const out = [];
    const reader = source().pipeThrough(upper).pipeThrough(count).getReader();
    for (let r = await reader.read(); !r.done; r = await reader.read()) out.push(r.value);
    const stopper = new TransformStream({
      transform(chunk, c) {
        c.enqueue(chunk);
        if (chunk === 'beta') c.terminate();
      },
    });
    const stopped = [];
    for await (const v of source().pipeThrough(stopper)) stopped.push(v);
    return Response.json({ out, stopped });
  },
};

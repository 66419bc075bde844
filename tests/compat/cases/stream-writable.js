/* compat
[{"path": "/"}]
*/
// WritableStream: a sink, a writer, pipeTo, and the states in between.
export default {
  async fetch() {
    const log = [];
    const ws = new WritableStream({
      start() { log.push('start'); },
      write(chunk) { log.push(`write ${chunk}`); },
      close() { log.push('close'); },
    }, new CountQueuingStrategy({ highWaterMark: 2 }));
    const writer = ws.getWriter();
    log.push(`desired ${writer.desiredSize}`);
    await writer.write('a');
    await writer.write('b');
    await writer.close();
    log.push(`locked ${ws.locked}`);
    const sink = [];
    const dest = new WritableStream({ write(c) { sink.push(c); } });
    await new ReadableStream({ start(c) { c.enqueue(1); c.enqueue(2); c.close(); } }).pipeTo(dest);
    let aborted = null;
    const ab = new WritableStream({ abort(reason) { aborted = reason; } });
    await ab.abort('stop');
    let errored;
    const failing = new WritableStream({ write() { throw new Error('sink failed'); } });
    const w2 = failing.getWriter();
    try {
      await w2.write('x');
    } catch (err) {
      errored = err.message;
    }
    return Response.json({ log, sink, aborted, errored });
  },
};

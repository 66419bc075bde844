/* compat
[{"path": "/"}]
*/
// tee(): both branches see every chunk; cancelling one leaves the other.
export default {
  async fetch() {
    let pulls = 0;
    const s = new ReadableStream({
      pull(c) {
        pulls++;
        if (pulls > 3) c.close();
        else c.enqueue(pulls);
      },
    });
    const [a, b] = s.tee();
    const readAll = async (st) => {
      const r = st.getReader();
      const vals = [];
      for (let x = await r.read(); !x.done; x = await r.read()) vals.push(x.value);
      return vals;
    };
    const [va, vb] = await Promise.all([readAll(a), readAll(b)]);
    const s2 = new ReadableStream({ start(c) { c.enqueue('x'); c.enqueue('y'); c.close(); } });
    const [c1, c2] = s2.tee();
    // Not awaited: by the Streams standard a branch's cancel() settles only
    // once the other branch is done too.
    const cancelling = c1.cancel('not needed');
    const rest = await readAll(c2);
    await cancelling;
    return Response.json({ va, vb, rest, locked: s.locked });
  },
};

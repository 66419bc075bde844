/* compat
[{"method": "POST", "path": "/", "body": "once"}]
*/
// bodyUsed before and after reading, and the error of a second read.
export default {
  async fetch(request) {
    const out = { before: request.bodyUsed };
    out.text = await request.text();
    out.after = request.bodyUsed;
    try {
      await request.text();
      out.second = 'ok';
    } catch (err) {
      out.second = err.name;
    }
    const r = new Response('abc');
    out.responseBefore = r.bodyUsed;
    const reader = r.body.getReader();
    out.lockedUsed = r.bodyUsed;
    await reader.read();
    out.afterRead = r.bodyUsed;
    const empty = new Response(null);
    out.nullBody = [empty.body, empty.bodyUsed, await empty.text(), empty.bodyUsed];
    try {
      await r.arrayBuffer();
      out.readLocked = 'ok';
    } catch (err) {
      out.readLocked = err.name;
    }
    return Response.json(out);
  },
};

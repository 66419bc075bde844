/* compat
[{"method": "POST", "path": "/", "chunks": ["h\u00e9", "llo \u20ac", " w\u00f6rld"]}]
*/
// TextDecoderStream over the request body, TextEncoderStream back out.
export default {
  async fetch(request) {
    const pieces = [];
    const text = request.body.pipeThrough(new TextDecoderStream());
    for await (const s of text) pieces.push(s);
    const joined = pieces.join('');
    const bytes = new ReadableStream({ start(c) { c.enqueue(joined); c.enqueue('\ud83d'); c.enqueue('\ude00!'); c.close(); } })
      .pipeThrough(new TextEncoderStream());
    return new Response(bytes, { headers: { 'content-type': 'text/plain;charset=utf-8' } });
  },
};

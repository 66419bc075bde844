/* compat
[{"path": "/pull"}, {"path": "/start"}, {"path": "/generator"}, {"path": "/strings"}]
*/
// ReadableStream responses: pull-based, enqueued at start, from an async
// generator, and the error when a chunk is not bytes.
export default {
  fetch(request) {
    const kind = new URL(request.url).pathname.slice(1);
    const enc = new TextEncoder();
    let body;
    if (kind === 'pull') {
      let i = 0;
      body = new ReadableStream({
        pull(controller) {
          if (i === 5) controller.close();
          else controller.enqueue(enc.encode(`line ${i++}\n`));
        },
      });
    } else if (kind === 'start') {
      body = new ReadableStream({
        start(controller) {
          for (let i = 0; i < 3; i++) controller.enqueue(enc.encode(`chunk ${i};`));
          controller.close();
        },
      });
    } else if (kind === 'generator') {
      body = new ReadableStream({
        async start(controller) {
          for (let i = 0; i < 4; i++) {
            await new Promise((resolve) => setTimeout(resolve, 2));
            controller.enqueue(enc.encode(`${i}`.repeat(i + 1)));
          }
          controller.close();
        },
      });
    } else {
      return new Response(new ReadableStream({
        start(controller) {
          controller.enqueue(enc.encode('ok'));
          controller.close();
        },
      }).pipeThrough(new TextDecoderStream()).pipeThrough(new TextEncoderStream()));
    }
    return new Response(body, { headers: { 'content-type': 'text/plain', 'x-kind': kind } });
  },
};

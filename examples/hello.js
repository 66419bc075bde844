// The smallest worker: every request gets a greeting.
export default {
  async fetch(request, env, ctx) {
    return new Response("Hello from edgenode!\n", {
      headers: { "content-type": "text/plain; charset=utf-8" },
    });
  },
};

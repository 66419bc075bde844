// A small JSON API over an in-memory list.
//   GET /items          -> every item
//   GET /items?id=N     -> one item, or 404 when there is none
//   anything else on /items -> 405; other paths -> 404
const items = [
  { id: 1, name: "apple", price: 0.5 },
  { id: 2, name: "bread", price: 2.25 },
  { id: 3, name: "cheese", price: 4.75 },
  { id: 4, name: "dates", price: 3.1 },
];

function json(body, status = 200, headers = {}) {
  return Response.json(body, { status, headers });
}

export default {
  async fetch(request, env, ctx) {
    const url = new URL(request.url);
    if (url.pathname !== "/items") {
      return json({ error: "not found", path: url.pathname }, 404);
    }
    if (request.method !== "GET") {
      return json({ error: "method not allowed", method: request.method, allow: "GET" }, 405, {
        allow: "GET",
      });
    }
    const raw = url.searchParams.get("id");
    if (raw === null) {
      return json({ items });
    }
    if (!/^[0-9]+$/.test(raw)) {
      return json({ error: "id must be a non-negative integer", id: raw }, 400);
    }
    const id = Number(raw);
    const item = items.find((it) => it.id === id);
    if (!item) {
      return json({ error: "unknown item", id }, 404);
    }
    return json(item);
  },
};

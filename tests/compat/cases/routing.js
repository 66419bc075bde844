/* compat
[{"path": "/"},
 {"path": "/users/42"},
 {"path": "/users/42", "method": "DELETE"},
 {"path": "/users", "method": "POST", "headers": {"content-type": "application/json"}, "body": "{\"name\":\"ada\"}"},
 {"path": "/nowhere"},
 {"path": "/users/42", "method": "PATCH"}]
*/
// A small REST router on URL and method.
const users = new Map([['42', { id: '42', name: 'grace' }]]);

export default {
  async fetch(request) {
    const url = new URL(request.url);
    const parts = url.pathname.split('/').filter(Boolean);
    if (parts.length === 0) return new Response('index\n');
    if (parts[0] !== 'users') return new Response('not found\n', { status: 404 });
    if (parts.length === 1 && request.method === 'POST') {
      const body = await request.json();
      return Response.json({ created: body.name }, { status: 201, headers: { location: '/users/43' } });
    }
    const user = users.get(parts[1]);
    switch (request.method) {
      case 'GET': return Response.json(user ?? null, { status: user ? 200 : 404 });
      case 'DELETE': return new Response(null, { status: 204 });
      default: return new Response('method not allowed\n', { status: 405, headers: { allow: 'GET, DELETE' } });
    }
  },
};

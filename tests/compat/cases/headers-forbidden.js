/* compat
[{"path": "/"}]
*/
// Names browsers forbid in request headers are ordinary here, as in every
// server runtime: a Worker may set Host, Cookie, Content-Length...
export default {
  fetch() {
    const names = ['host', 'cookie', 'content-length', 'connection', 'origin', 'referer', 'user-agent',
      'accept-charset', 'proxy-authorization', 'sec-fetch-mode', 'transfer-encoding', 'set-cookie2'];
    const h = new Headers();
    for (const n of names) h.set(n, 'x');
    const req = new Request('https://example.com/', { headers: h });
    const res = new Response('', { headers: { 'set-cookie': 'a=1', 'x-custom': 'y' } });
    return Response.json({
      request: names.map((n) => [n, req.headers.get(n)]),
      response: [...res.headers],
    });
  },
};

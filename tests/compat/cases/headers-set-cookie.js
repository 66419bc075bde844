/* compat
[{"path": "/"}]
*/
// Several Set-Cookie lines and other repeated headers on the wire.
export default {
  fetch() {
    const headers = new Headers();
    headers.append('Set-Cookie', 'session=abc; Path=/; HttpOnly');
    headers.append('Set-Cookie', 'theme=dark; Max-Age=3600');
    headers.append('Set-Cookie', 'expires=x; Expires=Wed, 21 Oct 2015 07:28:00 GMT');
    headers.append('Vary', 'Accept');
    headers.append('Vary', 'Accept-Encoding');
    headers.set('Cache-Control', 'no-store');
    return new Response('cookies\n', { headers });
  },
};

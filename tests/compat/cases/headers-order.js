/* compat
[{"path": "/"}]
*/
// Headers iteration: sorted names, combined values, set-cookie kept apart.
export default {
  fetch() {
    const h = new Headers();
    h.append('X-Zeta', '1');
    h.append('x-alpha', 'a');
    h.append('X-Zeta', '2');
    h.append('Set-Cookie', 'a=1');
    h.append('set-cookie', 'b=2');
    h.append('Accept', 'text/html');
    h.append('accept', 'application/json');
    const out = {
      entries: [...h],
      keys: [...h.keys()],
      values: [...h.values()],
      get: h.get('x-zeta'),
      getSetCookie: h.getSetCookie(),
      cookieGet: h.get('set-cookie'),
    };
    const seen = [];
    h.forEach((v, k) => seen.push(`${k}=${v}`));
    out.forEach = seen;
    h.delete('accept');
    h.set('X-ALPHA', 'b');
    out.after = [...h];
    return Response.json(out);
  },
};

/* compat
[{"path": "/"}, {"method": "POST", "path": "/body", "body": "The quick brown fox jumps over the lazy dog"}]
*/
// crypto.subtle.digest over every SHA, several input kinds, and a body.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');

export default {
  async fetch(request) {
    const out = {};
    if (request.method === 'POST') {
      for (const alg of ['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512']) {
        out[alg] = hex(await crypto.subtle.digest(alg, await request.clone().arrayBuffer()));
      }
      return Response.json(out);
    }
    const inputs = {
      empty: new Uint8Array(0),
      abc: new TextEncoder().encode('abc'),
      view: new Uint32Array([1, 2, 3]),
      buffer: new Uint8Array(1000).fill(97).buffer,
      dataview: new DataView(new Uint8Array([1, 2, 3, 4]).buffer, 1, 2),
    };
    for (const [name, data] of Object.entries(inputs)) {
      for (const alg of ['SHA-1', 'SHA-256', 'SHA-384', 'SHA-512']) {
        out[`${name} ${alg}`] = hex(await crypto.subtle.digest(alg, data));
      }
    }
    out.objectForm = hex(await crypto.subtle.digest({ name: 'sha-256' }, inputs.abc));
    try {
      await crypto.subtle.digest('SHA-3', inputs.abc);
    } catch (err) {
      out.unknown = err.name;
    }
    try {
      await crypto.subtle.digest('SHA-256', 'a string');
    } catch (err) {
      out.notBytes = err.name;
    }
    return Response.json(out);
  },
};

/* compat
[{"path": "/"}]
*/
// Bounds on work a single native call does, which the CPU limit cannot cut
// short in a process shared by tenants: PBKDF2 above 100,000 iterations is
// NotSupportedError (as on Cloudflare's platform; this workerd lets it run).
export default {
  async fetch() {
    const pw = await crypto.subtle.importKey('raw', new TextEncoder().encode('pw'), 'PBKDF2', false, ['deriveBits']);
    try {
      await crypto.subtle.deriveBits({ name: 'PBKDF2', hash: 'SHA-256', salt: new Uint8Array(8), iterations: 100001 }, pw, 128);
      return new Response('derived');
    } catch (err) {
      return new Response(err.name);
    }
  },
};

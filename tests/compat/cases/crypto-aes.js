/* compat
[{"path": "/"}]
*/
// AES-GCM, AES-CBC, AES-CTR and AES-KW with fixed keys: exact ciphertexts.
const hex = (buf) => [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, '0')).join('');
const bytes = (n, start = 0) => new Uint8Array(n).map((_, i) => (start + i * 7) & 0xff);
const text = new TextEncoder().encode('Attack at dawn! Attack at dawn!!!');

export default {
  async fetch() {
    const out = {};
    for (const bits of [128, 192, 256]) {
      const raw = bytes(bits / 8, bits);
      const gcm = await crypto.subtle.importKey('raw', raw, 'AES-GCM', true, ['encrypt', 'decrypt']);
      const iv = bytes(12, 3);
      const ct = await crypto.subtle.encrypt({ name: 'AES-GCM', iv, additionalData: bytes(5) }, gcm, text);
      const pt = await crypto.subtle.decrypt({ name: 'AES-GCM', iv, additionalData: bytes(5) }, gcm, ct);
      out[`gcm ${bits}`] = [hex(ct), new TextDecoder().decode(pt)];
      const short = await crypto.subtle.encrypt({ name: 'AES-GCM', iv, tagLength: 96 }, gcm, text);
      out[`gcm96 ${bits}`] = hex(short);
      const cbc = await crypto.subtle.importKey('raw', raw, { name: 'AES-CBC' }, false, ['encrypt', 'decrypt']);
      const cbcCt = await crypto.subtle.encrypt({ name: 'AES-CBC', iv: bytes(16, 9) }, cbc, text);
      out[`cbc ${bits}`] = [hex(cbcCt), new TextDecoder().decode(await crypto.subtle.decrypt({ name: 'AES-CBC', iv: bytes(16, 9) }, cbc, cbcCt))];
      const ctr = await crypto.subtle.importKey('raw', raw, 'AES-CTR', false, ['encrypt']);
      out[`ctr ${bits}`] = hex(await crypto.subtle.encrypt({ name: 'AES-CTR', counter: bytes(16, 1), length: 64 }, ctr, text));
      const kw = await crypto.subtle.importKey('raw', raw, 'AES-KW', false, ['wrapKey', 'unwrapKey']);
      const toWrap = await crypto.subtle.importKey('raw', bytes(16, 5), 'AES-GCM', true, ['encrypt']);
      const wrapped = await crypto.subtle.wrapKey('raw', toWrap, kw, 'AES-KW');
      const unwrapped = await crypto.subtle.unwrapKey('raw', wrapped, kw, 'AES-KW', 'AES-GCM', true, ['encrypt']);
      out[`kw ${bits}`] = [hex(wrapped), hex(await crypto.subtle.exportKey('raw', unwrapped))];
    }
    const key = await crypto.subtle.importKey('raw', bytes(16), 'AES-GCM', true, ['encrypt', 'decrypt']);
    const ct = new Uint8Array(await crypto.subtle.encrypt({ name: 'AES-GCM', iv: bytes(12) }, key, text));
    ct[0] ^= 1;
    try {
      await crypto.subtle.decrypt({ name: 'AES-GCM', iv: bytes(12) }, key, ct);
    } catch (err) {
      out.tampered = err.name;
    }
    try {
      await crypto.subtle.importKey('raw', bytes(15), 'AES-GCM', true, ['encrypt']);
    } catch (err) {
      out.badLength = err.name;
    }
    out.jwk = await crypto.subtle.exportKey('jwk', key);
    const gen = await crypto.subtle.generateKey({ name: 'AES-CBC', length: 256 }, true, ['encrypt']);
    out.generated = [gen.algorithm, gen.usages, (await crypto.subtle.exportKey('raw', gen)).byteLength];
    return Response.json(out);
  },
};

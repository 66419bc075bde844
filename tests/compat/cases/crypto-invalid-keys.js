/* compat
[{"path": "/"}]
*/
// Key data that is not a valid key: the Web Crypto standard says DataError;
// workerd answers OperationError for a point off the curve.
export default {
  async fetch() {
    const jwk = { kty: 'EC', crv: 'P-256', x: 'F5YeTHGO6K1Xlmg9TH4ctcBLx7a49nldn1M1lnxjmk0', y: 'F5YeTHGO6K1Xlmg9TH4ctcBLx7a49nldn1M1lnxjmk0' };
    try {
      await crypto.subtle.importKey('jwk', jwk, { name: 'ECDSA', namedCurve: 'P-256' }, true, ['verify']);
      return new Response('imported');
    } catch (err) {
      return new Response(err.name);
    }
  },
};

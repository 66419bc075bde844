/* compat
[{"path": "/"}]
*/
// URLPattern's methods and errors: test, exec with a base and a dictionary,
// invalid patterns.
function attempt(fn) {
  try {
    return fn();
  } catch (err) {
    return `throws ${err.name}`;
  }
}

export default {
  fetch() {
    const p = new URLPattern({ pathname: '/items/:id' });
    return Response.json({
      test: [p.test('https://a.com/items/1'), p.test('https://a.com/items/'), p.test('/items/2', 'https://b.com')],
      dict: p.exec({ pathname: '/items/9' }).pathname,
      inputs: p.exec('/items/3', 'https://c.com').inputs,
      badUrl: p.exec('not a url'),
      relativeNoBase: attempt(() => new URLPattern('/no/base')),
      badRegexp: attempt(() => new URLPattern({ pathname: '/(' })),
      capturingGroup: attempt(() => new URLPattern({ pathname: '/((a))' })),
      duplicateName: attempt(() => new URLPattern({ pathname: '/:a/:a' })),
      empty: (() => { const e = new URLPattern(); return [e.pathname, e.test('https://any.where/at/all')]; })(),
      tag: Object.prototype.toString.call(p),
    });
  },
};

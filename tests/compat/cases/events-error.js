/* compat
[{"path": "/"}]
*/
// ErrorEvent made by a script (PromiseRejectionEvent: see strict-guards).
function attempt(fn) {
  try {
    return fn();
  } catch (err) {
    return `throws ${err.name}`;
  }
}

export default {
  fetch() {
    const err = new RangeError('bad');
    return Response.json({
      error: attempt(() => {
        const e = new ErrorEvent('error', { message: 'm', filename: 'f.js', lineno: 3, colno: 7, error: err, cancelable: true });
        return [e.type, e.message, e.filename, e.lineno, e.colno, e.error === err, e.cancelable, e instanceof Event];
      }),
      defaults: attempt(() => {
        const d = new ErrorEvent('error');
        return [d.message, d.filename, d.lineno, d.colno, d.error];
      }),
      missing: attempt(() => new PromiseRejectionEvent('unhandledrejection', {}).type),
    });
  },
};

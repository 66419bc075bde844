/* compat
[{"path": "/"}]
*/
// DOMException: names, legacy codes, inheritance.
export default {
  fetch() {
    const out = {};
    for (const name of ['AbortError', 'TimeoutError', 'NotFoundError', 'DataCloneError', 'SyntaxError', 'Custom']) {
      const e = new DOMException('msg', name);
      out[name] = [e.name, e.message, e.code, e instanceof Error, String(e)];
    }
    const d = new DOMException();
    out.default = [d.name, d.message, d.code];
    out.constants = [DOMException.ABORT_ERR, DOMException.TIMEOUT_ERR, DOMException.NOT_FOUND_ERR];
    out.tag = Object.prototype.toString.call(d);
    out.stack = typeof new DOMException('x').stack;
    return Response.json(out);
  },
};

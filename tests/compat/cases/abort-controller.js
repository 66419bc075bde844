/* compat
[{"path": "/"}]
*/
// AbortController and AbortSignal: reasons, events, throwIfAborted.
export default {
  fetch() {
    const out = {};
    const c = new AbortController();
    const log = [];
    c.signal.addEventListener('abort', (e) => log.push(`listener ${e.type} ${e.isTrusted}`));
    c.signal.onabort = () => log.push('onabort');
    out.before = [c.signal.aborted, c.signal.reason];
    c.abort();
    c.abort('second abort is ignored');
    out.after = [c.signal.aborted, c.signal.reason.name, c.signal.reason.message, c.signal.reason instanceof DOMException];
    out.log = log;
    const custom = new AbortController();
    custom.abort({ why: 'custom' });
    out.custom = custom.signal.reason;
    try {
      custom.signal.throwIfAborted();
    } catch (err) {
      out.thrown = err;
    }
    const already = AbortSignal.abort('gone');
    out.already = [already.aborted, already.reason];
    try {
      new AbortSignal();
    } catch (err) {
      out.ctor = err.name;
    }
    out.tags = [Object.prototype.toString.call(c), Object.prototype.toString.call(c.signal)];
    return Response.json(out);
  },
};

/* compat
[{"path": "/"}]
*/
// The listeners an event reaches are those registered when its dispatch
// began: one removed meanwhile is skipped, one added meanwhile waits for
// the next event.
export default {
  fetch() {
    const out = {};
    {
      const et = new EventTarget();
      const log = [];
      const b = () => log.push('b');
      et.addEventListener('x', () => { log.push('a'); et.removeEventListener('x', b); });
      et.addEventListener('x', b);
      et.dispatchEvent(new Event('x'));
      et.dispatchEvent(new Event('x'));
      out.removed = log;
    }
    {
      const et = new EventTarget();
      const log = [];
      et.addEventListener('x', () => { log.push('a'); et.addEventListener('x', () => log.push('late')); });
      et.dispatchEvent(new Event('x'));
      et.dispatchEvent(new Event('x'));
      out.added = log;
    }
    {
      const et = new EventTarget();
      const log = [];
      const again = () => log.push('again');
      et.addEventListener('x', () => { log.push('once'); et.addEventListener('x', again); }, { once: true });
      et.dispatchEvent(new Event('x'));
      et.dispatchEvent(new Event('x'));
      out.onceAdds = log;
    }
    return Response.json(out);
  },
};

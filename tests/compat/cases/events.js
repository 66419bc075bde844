/* compat
[{"path": "/"}]
*/
// EventTarget, Event and CustomEvent.
export default {
  fetch() {
    const t = new EventTarget();
    const log = [];
    const once = () => log.push('once');
    t.addEventListener('ping', once, { once: true });
    t.addEventListener('ping', (e) => log.push(`a ${e.detail} ${e.eventPhase} ${e.target === t}`));
    t.addEventListener('ping', { handleEvent: (e) => log.push(`object ${e.type}`) });
    t.addEventListener('ping', () => log.push('duplicate'));
    const stopper = (e) => { log.push('stopper'); e.stopImmediatePropagation(); };
    t.addEventListener('stop', stopper);
    t.addEventListener('stop', () => log.push('never'));
    t.dispatchEvent(new CustomEvent('ping', { detail: 42 }));
    t.dispatchEvent(new CustomEvent('ping', { detail: 43 }));
    t.dispatchEvent(new Event('stop'));
    const cancel = new Event('c', { cancelable: true });
    t.addEventListener('c', (e) => e.preventDefault());
    const notCanceled = t.dispatchEvent(cancel);
    const passive = new Event('p', { cancelable: true });
    t.addEventListener('p', (e) => e.preventDefault(), { passive: true });
    const ctl = new AbortController();
    t.addEventListener('removed', () => log.push('removed ran'), { signal: ctl.signal });
    ctl.abort();
    t.dispatchEvent(new Event('removed'));
    const e = new Event('x', { bubbles: true });
    return Response.json({
      log, notCanceled, defaultPrevented: cancel.defaultPrevented, passive: [t.dispatchEvent(passive), passive.defaultPrevented],
      props: [e.type, e.bubbles, e.cancelable, e.composed, e.isTrusted, e.eventPhase, e.defaultPrevented, typeof e.timeStamp],
      constants: [Event.NONE, Event.CAPTURING_PHASE, Event.AT_TARGET, Event.BUBBLING_PHASE],
    });
  },
};

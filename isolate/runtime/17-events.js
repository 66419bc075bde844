// Event, CustomEvent, EventTarget, AbortController and AbortSignal (DOM).
// There is no tree: dispatch reaches only the target itself.
//
// Made the first time a worker needs one (lazyFragment, 00-util.js): a
// request's signal is made when it is read. The body is not indented.
//
// Takes from
//   00-util.js: lazyFragment, requireArgs, toDOMString, toDictionary, defineInterface,
//     registerInspect, toUSVString, toIntegerModulo, isObjectLike, kPrivate,
//     toEnforcedUnsignedLongLong, defineLazyGlobals
//   05-domexception.js: DOMException
//   08-clock.js: performanceNow
//   11-report-error.js: reportError
//   12-timers.js: startInternalTimer

let eventsMade = false;
const eventsFragment = lazyFragment(() => {
eventsMade = true;

class EventState {
  constructor(type, init) {
    this.type = type;
    this.bubbles = init !== null && !!init.bubbles;
    this.cancelable = init !== null && !!init.cancelable;
    this.composed = init !== null && !!init.composed;
    this.canceled = false;
    this.target = null;
    this.currentTarget = null;
    this.phase = 0;
    this.stopPropagation = false;
    this.stopImmediate = false;
    this.dispatching = false;
    this.inPassiveListener = false;
    this.trusted = false;
    this.timeStamp = performanceNow();
  }
}

let eventStateOf; // (event) -> EventState; throws for non-events

class Event {
  #s;

  constructor(type, eventInitDict = undefined) {
    requireArgs(arguments.length, 1, 'constructor', 'Event');
    this.#s = new EventState(toDOMString(type), toDictionary(eventInitDict, 'eventInitDict'));
  }

  static {
    eventStateOf = (e) => e.#s;
  }

  get type() { return this.#s.type; }
  get target() { return this.#s.target; }
  get srcElement() { return this.#s.target; }
  get currentTarget() { return this.#s.currentTarget; }
  get eventPhase() { return this.#s.phase; }
  get bubbles() { return this.#s.bubbles; }
  get cancelable() { return this.#s.cancelable; }
  get composed() { return this.#s.composed; }
  get defaultPrevented() { return this.#s.canceled; }
  get isTrusted() { return this.#s.trusted; }
  get timeStamp() { return this.#s.timeStamp; }

  get returnValue() {
    return !this.#s.canceled;
  }

  set returnValue(value) {
    if (!value) this.preventDefault();
  }

  get cancelBubble() {
    return this.#s.stopPropagation;
  }

  set cancelBubble(value) {
    if (value) this.#s.stopPropagation = true;
  }

  composedPath() {
    const s = this.#s;
    return s.dispatching && s.currentTarget !== null ? [s.currentTarget] : [];
  }

  stopPropagation() {
    this.#s.stopPropagation = true;
  }

  stopImmediatePropagation() {
    this.#s.stopPropagation = true;
    this.#s.stopImmediate = true;
  }

  preventDefault() {
    const s = this.#s;
    if (s.cancelable && !s.inPassiveListener) s.canceled = true;
  }
}
for (const [name, value] of [['NONE', 0], ['CAPTURING_PHASE', 1], ['AT_TARGET', 2], ['BUBBLING_PHASE', 3]]) {
  Object.defineProperty(Event, name, { value, enumerable: true });
  Object.defineProperty(Event.prototype, name, { value, enumerable: true });
}
defineInterface(Event, 'Event');
registerInspect(Event, (e) => ({
  type: e.type, defaultPrevented: e.defaultPrevented, cancelable: e.cancelable,
  timeStamp: e.timeStamp,
}));

class CustomEvent extends Event {
  #detail;

  constructor(type, eventInitDict = undefined) {
    requireArgs(arguments.length, 1, 'constructor', 'CustomEvent');
    super(type, eventInitDict);
    const init = toDictionary(eventInitDict, 'eventInitDict');
    this.#detail = init !== null && init.detail !== undefined ? init.detail : null;
  }

  get detail() {
    return this.#detail;
  }
}
defineInterface(CustomEvent, 'CustomEvent');

// ErrorEvent and PromiseRejectionEvent (HTML), for portable code that makes
// or inspects them; nothing in the runtime dispatches them.
class ErrorEvent extends Event {
  #message;
  #filename;
  #lineno;
  #colno;
  #error;

  constructor(type, eventInitDict = undefined) {
    requireArgs(arguments.length, 1, 'constructor', 'ErrorEvent');
    super(type, eventInitDict);
    const init = toDictionary(eventInitDict, 'eventInitDict');
    const get = (k, d) => (init !== null && init[k] !== undefined ? init[k] : d);
    this.#message = toDOMString(get('message', ''));
    this.#filename = toUSVString(get('filename', ''));
    this.#lineno = toIntegerModulo(get('lineno', 0), 32, false);
    this.#colno = toIntegerModulo(get('colno', 0), 32, false);
    this.#error = get('error', undefined);
  }

  get message() { return this.#message; }
  get filename() { return this.#filename; }
  get lineno() { return this.#lineno; }
  get colno() { return this.#colno; }
  get error() { return this.#error; }
}
defineInterface(ErrorEvent, 'ErrorEvent');

class PromiseRejectionEvent extends Event {
  #promise;
  #reason;

  constructor(type, eventInitDict) {
    requireArgs(arguments.length, 2, 'constructor', 'PromiseRejectionEvent');
    super(type, eventInitDict);
    const init = toDictionary(eventInitDict, 'eventInitDict');
    if (init === null || !isObjectLike(init.promise)) {
      throw new TypeError("Failed to construct 'PromiseRejectionEvent': required member promise is not an object.");
    }
    this.#promise = init.promise;
    this.#reason = init.reason;
  }

  get promise() { return this.#promise; }
  get reason() { return this.#reason; }
}
defineInterface(PromiseRejectionEvent, 'PromiseRejectionEvent');

class EventListenerEntry {
  constructor(callback, capture, once, passive) {
    this.callback = callback;
    this.capture = capture;
    this.once = once;
    this.passive = passive;
    this.removed = false;
  }
}

function flattenListenerOptions(options) {
  if (typeof options === 'boolean') return options;
  if (isObjectLike(options)) return !!options.capture;
  return !!options;
}

let eventTargetDispatch; // (target, event) -> boolean, bypassing the public checks

class EventTarget {
  #listeners = null; // Map type -> EventListenerEntry[]

  addEventListener(type, callback, options = undefined) {
    requireArgs(arguments.length, 2, 'addEventListener', 'EventTarget');
    type = toDOMString(type);
    if (callback !== null && !isObjectLike(callback)) {
      throw new TypeError("Failed to execute 'addEventListener' on 'EventTarget': parameter 2 is not of type 'Object'.");
    }
    let capture = false;
    let once = false;
    let passive = false;
    let signal = null;
    if (isObjectLike(options)) {
      capture = !!options.capture;
      once = !!options.once;
      passive = !!options.passive;
      if (options.signal !== undefined) {
        signal = options.signal;
        if (!(signal instanceof AbortSignal)) {
          throw new TypeError("Failed to execute 'addEventListener' on 'EventTarget': member signal is not of type AbortSignal.");
        }
      }
    } else {
      capture = !!options;
    }
    if (callback === null) return;
    if (signal !== null && signal.aborted) return;
    if (this.#listeners === null) this.#listeners = new Map();
    const list = this.#listeners.get(type) ?? [];
    for (let i = 0; i < list.length; i++) {
      if (list[i].callback === callback && list[i].capture === capture) return;
    }
    const entry = new EventListenerEntry(callback, capture, once, passive);
    // A fresh array, as in #remove: a dispatch in progress keeps iterating
    // the list it started with, so a listener added meanwhile waits for
    // the next event (DOM: the listeners are cloned when dispatch begins).
    this.#listeners.set(type, list.concat([entry]));
    if (signal !== null) {
      abortSignalAddAlgorithm(signal, () => this.#remove(type, callback, capture));
    }
  }

  removeEventListener(type, callback, options = undefined) {
    requireArgs(arguments.length, 2, 'removeEventListener', 'EventTarget');
    this.#remove(toDOMString(type), callback, flattenListenerOptions(options));
  }

  #remove(type, callback, capture) {
    if (this.#listeners === null || callback === null) return;
    const list = this.#listeners.get(type);
    if (list === undefined) return;
    for (let i = 0; i < list.length; i++) {
      const entry = list[i];
      if (entry.callback === callback && entry.capture === capture) {
        entry.removed = true;
        // A fresh array: a dispatch in progress keeps iterating the old one.
        const next = list.slice(0, i).concat(list.slice(i + 1));
        if (next.length === 0) this.#listeners.delete(type);
        else this.#listeners.set(type, next);
        return;
      }
    }
  }

  dispatchEvent(event) {
    requireArgs(arguments.length, 1, 'dispatchEvent', 'EventTarget');
    if (!(event instanceof Event)) {
      throw new TypeError("Failed to execute 'dispatchEvent' on 'EventTarget': parameter 1 is not of type 'Event'.");
    }
    const s = eventStateOf(event);
    if (s.dispatching) {
      throw new DOMException('The event is already being dispatched.', 'InvalidStateError');
    }
    s.trusted = false;
    return this.#dispatch(event, s);
  }

  #dispatch(event, s) {
    s.dispatching = true;
    s.target = this;
    s.currentTarget = this;
    s.phase = 2; // AT_TARGET
    const list = this.#listeners === null ? undefined : this.#listeners.get(s.type);
    if (list !== undefined) {
      // Capturing listeners first, then the others, as at the target of a tree.
      this.#invoke(event, s, list, true);
      if (!s.stopPropagation) this.#invoke(event, s, list, false);
    }
    s.dispatching = false;
    s.phase = 0;
    s.currentTarget = null;
    s.stopPropagation = false;
    s.stopImmediate = false;
    return !s.canceled;
  }

  #invoke(event, s, list, capturePass) {
    for (let i = 0; i < list.length; i++) {
      const entry = list[i];
      if (entry.removed || entry.capture !== capturePass) continue;
      if (entry.once) this.#remove(s.type, entry.callback, entry.capture);
      s.inPassiveListener = entry.passive;
      try {
        const cb = entry.callback;
        if (typeof cb === 'function') {
          cb.call(this, event);
        } else {
          const handleEvent = cb.handleEvent;
          if (typeof handleEvent !== 'function') {
            throw new TypeError("'handleEvent' property of the event listener is not a function.");
          }
          handleEvent.call(cb, event);
        }
      } catch (err) {
        reportError(err);
      }
      s.inPassiveListener = false;
      if (s.stopImmediate) break;
    }
  }

  static {
    eventTargetDispatch = (target, event) => {
      const s = eventStateOf(event);
      s.trusted = true;
      return target.#dispatch(event, s);
    };
  }
}
defineInterface(EventTarget, 'EventTarget');

// AbortSignal ----------------------------------------------------------------

let abortSignalAddAlgorithm; // (signal, fn): run fn when the signal aborts
let abortSignalAbort;        // (signal, reason): signal abort
let abortSignalNew;          // () -> a fresh, unaborted signal

class AbortSignal extends EventTarget {
  #aborted = false;
  #reason = undefined;
  #algorithms = null; // functions run on abort, before the event
  #dependents = null; // signals made by AbortSignal.any() that follow this one
  #sources = null;    // for such a signal: the signals it follows
  #onabort = null;
  #onabortListener = null;

  constructor(key) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    super();
  }

  static abort(reason = undefined) {
    const signal = new AbortSignal(kPrivate);
    signal.#aborted = true;
    signal.#reason = reason === undefined ? abortDefaultReason() : reason;
    return signal;
  }

  static timeout(milliseconds) {
    requireArgs(arguments.length, 1, 'timeout', 'AbortSignal');
    const ms = toEnforcedUnsignedLongLong(milliseconds, 'AbortSignal.timeout() argument');
    const signal = new AbortSignal(kPrivate);
    startInternalTimer(ms, () => {
      AbortSignal.#signalAbort(signal,
        new DOMException('The operation was aborted due to timeout', 'TimeoutError'));
    });
    return signal;
  }

  static any(signals) {
    requireArgs(arguments.length, 1, 'any', 'AbortSignal');
    if (!isObjectLike(signals) || typeof signals[Symbol.iterator] !== 'function') {
      throw new TypeError("Failed to execute 'any' on 'AbortSignal': The provided value cannot be converted to a sequence.");
    }
    const list = [];
    for (const s of signals) {
      if (!(s instanceof AbortSignal)) {
        throw new TypeError("Failed to execute 'any' on 'AbortSignal': Failed to convert value to 'AbortSignal'.");
      }
      list.push(s);
    }
    const result = new AbortSignal(kPrivate);
    for (const s of list) {
      if (s.#aborted) {
        result.#aborted = true;
        result.#reason = s.#reason;
        return result;
      }
    }
    // A dependent signal follows the sources of the signals it was made
    // from, never those signals themselves: no chains to walk on abort.
    const sources = [];
    for (const s of list) {
      const from = s.#sources === null ? [s] : s.#sources;
      for (const src of from) if (!sources.includes(src)) sources.push(src);
    }
    result.#sources = sources;
    for (const src of sources) {
      if (src.#dependents === null) src.#dependents = [];
      src.#dependents.push(result);
    }
    return result;
  }

  get aborted() {
    return this.#aborted;
  }

  get reason() {
    return this.#reason;
  }

  throwIfAborted() {
    if (this.#aborted) throw this.#reason;
  }

  get onabort() {
    return this.#onabort;
  }

  set onabort(handler) {
    this.#onabort = isObjectLike(handler) ? handler : null;
    if (this.#onabort !== null && this.#onabortListener === null) {
      this.#onabortListener = (event) => {
        const h = this.#onabort;
        if (typeof h === 'function') h.call(this, event);
      };
      this.addEventListener('abort', this.#onabortListener);
    }
  }

  static #signalAbort(signal, reason) {
    if (signal.#aborted) return;
    signal.#aborted = true;
    signal.#reason = reason;
    const followers = [];
    if (signal.#dependents !== null) {
      for (const d of signal.#dependents) {
        if (d.#aborted) continue;
        d.#aborted = true;
        d.#reason = reason;
        followers.push(d);
      }
      signal.#dependents = null;
    }
    AbortSignal.#runAbortSteps(signal);
    for (const d of followers) AbortSignal.#runAbortSteps(d);
  }

  static #runAbortSteps(signal) {
    const algorithms = signal.#algorithms;
    signal.#algorithms = null;
    if (algorithms !== null) {
      for (const fn of algorithms) {
        try {
          fn();
        } catch (err) {
          reportError(err);
        }
      }
    }
    eventTargetDispatch(signal, new Event('abort'));
  }

  static {
    abortSignalAddAlgorithm = (signal, fn) => {
      if (signal.#aborted) return;
      if (signal.#algorithms === null) signal.#algorithms = [];
      signal.#algorithms.push(fn);
    };
    abortSignalAbort = (signal, reason) => AbortSignal.#signalAbort(signal, reason);
    abortSignalNew = () => new AbortSignal(kPrivate);
  }
}
defineInterface(AbortSignal, 'AbortSignal');
registerInspect(AbortSignal, (s) => ({ aborted: s.aborted }));

function abortDefaultReason() {
  return new DOMException('The operation was aborted', 'AbortError');
}

class AbortController {
  #signal = abortSignalNew();

  get signal() {
    return this.#signal;
  }

  abort(reason = undefined) {
    abortSignalAbort(this.#signal, reason === undefined ? abortDefaultReason() : reason);
  }
}
defineInterface(AbortController, 'AbortController');
registerInspect(AbortController, (c) => ({ signal: c.signal }));

return {
  Event, CustomEvent, ErrorEvent, PromiseRejectionEvent, EventTarget, AbortSignal, AbortController,
  abortSignalAddAlgorithm, abortSignalNew,
};
});
defineLazyGlobals(eventsFragment, [
  'Event', 'CustomEvent', 'ErrorEvent', 'PromiseRejectionEvent', 'EventTarget', 'AbortSignal',
  'AbortController',
]);

// What the other files use; no signal exists before the fragment is made.
function isAbortSignal(v) {
  return eventsMade && v instanceof eventsFragment().AbortSignal;
}

function abortSignalNew() {
  return eventsFragment().abortSignalNew();
}

function abortSignalAddAlgorithm(signal, fn) {
  return eventsFragment().abortSignalAddAlgorithm(signal, fn);
}

// The remaining globals: structuredClone, performance, navigator, scheduler,
// self and the global scope's event target (addEventListener, ...). It also
// installs queueMicrotask and reportError (11-report-error.js) and crypto
// (18-crypto.js), so that the enumerable globals come in the Workers' order.
//
// Takes from
//   00-util.js: requireArgs, toDictionary, isObjectLike, isArrayBuffer, kPrivate, defineInterface,
//     defineGlobal
//   05-domexception.js: DOMException
//   08-clock.js: performanceTimeOrigin, performanceNow
//   10-console.js: consoleWrite
//   11-report-error.js: queueMicrotask, reportError
//   12-timers.js: setTimeout, clearTimeout
//   17-events.js: isAbortSignal, abortSignalAddAlgorithm, eventsFragment
//   18-crypto.js: crypto

function structuredClone(value, options = undefined) {
  requireArgs(arguments.length, 1, 'structuredClone', 'ServiceWorkerGlobalScope');
  const opts = toDictionary(options, "The 'options' argument");
  // Only ArrayBuffers can be transferred here (there are no message ports):
  // the clone gets a copy of their bytes and the originals are detached.
  const transfer = [];
  if (opts !== null && opts.transfer !== undefined) {
    const list = opts.transfer;
    if (!isObjectLike(list) || typeof list[Symbol.iterator] !== 'function') {
      throw new TypeError("Failed to execute 'structuredClone': transfer is not iterable.");
    }
    for (const item of list) {
      if (!isArrayBuffer(item)) {
        throw new DOMException('Value not transferable: only ArrayBuffers can be transferred.', 'DataCloneError');
      }
      if (transfer.includes(item)) {
        throw new DOMException('ArrayBuffer at index is a duplicate of an earlier ArrayBuffer.', 'DataCloneError');
      }
      transfer.push(item);
    }
  }
  let out;
  try {
    out = native.structuredClone(value);
  } catch (err) {
    if (isObjectLike(err) && err.name === 'DataCloneError') {
      throw new DOMException(err.message, 'DataCloneError');
    }
    throw err;
  }
  for (const ab of transfer) native.detachArrayBuffer(ab);
  return out;
}

class Performance {
  constructor(key) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
  }

  get timeOrigin() {
    return performanceTimeOrigin();
  }

  now() {
    return performanceNow();
  }

  toJSON() {
    return { timeOrigin: this.timeOrigin };
  }
}
defineInterface(Performance, 'Performance');

class Navigator {
  constructor(key) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
  }

  get userAgent() {
    return 'edgenode';
  }

  get hardwareConcurrency() {
    return 1;
  }
}
defineInterface(Navigator, 'Navigator');

// scheduler.wait(ms): an awaitable setTimeout, as the Workers runtime has.
class Scheduler {
  constructor(key) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
  }

  wait(delay, options = undefined) {
    try {
      const opts = toDictionary(options, "The 'options' argument");
      const signal = opts === null ? undefined : opts.signal;
      if (signal !== undefined && !isAbortSignal(signal)) {
        throw new TypeError("Failed to execute 'wait' on 'Scheduler': member signal is not of type AbortSignal.");
      }
      if (signal !== undefined && signal.aborted) return Promise.reject(signal.reason);
      return new Promise((resolve, reject) => {
        const id = setTimeout(resolve, delay);
        if (signal !== undefined) {
          abortSignalAddAlgorithm(signal, () => {
            clearTimeout(id);
            reject(signal.reason);
          });
        }
      });
    } catch (err) {
      return Promise.reject(err);
    }
  }
}
defineInterface(Scheduler, 'Scheduler');

// The global scope is an event target too (addEventListener('unhandledrejection', ...)
// is common in portable code); nothing but the runtime dispatches on it.
let globalEventTarget = null;
function globalTarget() {
  if (globalEventTarget === null) globalEventTarget = new (eventsFragment().EventTarget)();
  return globalEventTarget;
}

defineGlobal('queueMicrotask', queueMicrotask);
defineGlobal('reportError', reportError);
defineGlobal('structuredClone', structuredClone);
defineGlobal('Performance', Performance);
defineGlobal('Navigator', Navigator);
// These five are enumerable own properties of the global object in the
// Workers runtime (as instance attributes are in browsers), in this order.
defineGlobal('navigator', new Navigator(kPrivate), true);
defineGlobal('performance', new Performance(kPrivate), true);
defineGlobal('scheduler', new Scheduler(kPrivate), true);
defineGlobal('crypto', crypto, true);
defineGlobal('self', globalThis, true);
defineGlobal('addEventListener', function addEventListener(type, listener, options = undefined) {
  requireArgs(arguments.length, 2, 'addEventListener', 'ServiceWorkerGlobalScope');
  if (`${type}` === 'fetch') {
    consoleWrite(2, "addEventListener('fetch') has no effect here: export a default object with a fetch() method instead.");
  }
  return globalTarget().addEventListener(type, listener, options);
});
defineGlobal('removeEventListener', function removeEventListener(type, listener, options = undefined) {
  requireArgs(arguments.length, 2, 'removeEventListener', 'ServiceWorkerGlobalScope');
  return globalTarget().removeEventListener(type, listener, options);
});
defineGlobal('dispatchEvent', function dispatchEvent(event) {
  requireArgs(arguments.length, 1, 'dispatchEvent', 'ServiceWorkerGlobalScope');
  return globalTarget().dispatchEvent(event);
});

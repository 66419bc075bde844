// setTimeout / setInterval and their clear functions. Ids are allocated
// here; the host only schedules (native.timerStart) and calls fireTimer().
// A timer belongs to the request that started it and is cancelled when that
// request is done, as a Workers request's I/O context ends with it.
//
// Takes from
//   00-util.js: activeRequest, defineGlobal
//   11-report-error.js: reportError

const timerMaxDelay = 0x7fffffff;

class TimerRecord {
  constructor(callback, args, delay, repeat, request) {
    this.callback = callback;
    this.args = args;
    this.delay = delay;
    this.repeat = repeat;
    this.request = request;
  }
}

const timers = new Map(); // id -> TimerRecord
let lastTimerId = 0;

function allocateTimerId() {
  do {
    lastTimerId = lastTimerId >= timerMaxDelay ? 1 : lastTimerId + 1;
  } while (timers.has(lastTimerId));
  return lastTimerId;
}

function timerDelay(delay) {
  const d = Number(delay);
  if (!(d > 0)) return 0;
  return d > timerMaxDelay ? timerMaxDelay : d;
}

function startTimer(callback, args, delay, repeat) {
  const id = allocateTimerId();
  const request = activeRequest;
  // Code still running for a request that is over (a stray promise chain)
  // gets an id, but its timer never runs: the request's timers are gone.
  if (request !== null && request.done) return id;
  native.timerStart(id, delay);
  timers.set(id, new TimerRecord(callback, args, delay, repeat, request));
  if (request !== null) request.addTimer(id);
  return id;
}

// For runtime internals (AbortSignal.timeout): no id escapes.
function startInternalTimer(delay, fn) {
  return startTimer(fn, [], timerDelay(delay), false);
}

function forgetTimer(id, rec) {
  timers.delete(id);
  if (rec.request !== null) rec.request.removeTimer(id);
}

function checkTimerCallback(callback, name) {
  if (typeof callback === 'function') return;
  if (typeof callback === 'string') {
    throw new TypeError(`${name}() requires a function: code in a string cannot run here (code generation from strings is disallowed).`);
  }
  throw new TypeError(`Failed to execute '${name}' on 'ServiceWorkerGlobalScope': parameter 1 is not of type 'Function'.`);
}

function setTimeout(callback, delay = 0, ...args) {
  checkTimerCallback(callback, 'setTimeout');
  return startTimer(callback, args, timerDelay(delay), false);
}

function setInterval(callback, delay = 0, ...args) {
  checkTimerCallback(callback, 'setInterval');
  // A zero interval would fire on every turn of the host's loop.
  return startTimer(callback, args, Math.max(1, timerDelay(delay)), true);
}

function clearTimer(id) {
  let key = id;
  if (typeof key !== 'number') {
    try {
      key = Number(key);
    } catch {
      return;
    }
  }
  const rec = timers.get(key);
  if (rec === undefined) return;
  forgetTimer(key, rec);
  native.timerCancel(key);
}

function clearTimeout(id = undefined) {
  clearTimer(id);
}

function clearInterval(id = undefined) {
  clearTimer(id);
}

// Called by the host when timer `timerId` is due.
function fireTimer(timerId) {
  const rec = timers.get(timerId);
  if (rec === undefined) return; // cancelled meanwhile
  activeRequest = rec.request;
  if (!rec.repeat) forgetTimer(timerId, rec);
  try {
    const cb = rec.callback;
    if (rec.args.length === 0) cb.call(globalThis);
    else cb.apply(globalThis, rec.args);
  } catch (err) {
    reportError(err);
  }
  if (rec.repeat && timers.get(timerId) === rec) {
    try {
      native.timerStart(timerId, rec.delay);
    } catch (err) {
      forgetTimer(timerId, rec);
      reportError(err);
    }
  }
}

// Cancels every timer a finished request left behind.
function cancelTimers(ids) {
  for (const id of ids) {
    if (!timers.has(id)) continue;
    timers.delete(id);
    native.timerCancel(id);
  }
}

defineGlobal('setTimeout', setTimeout);
defineGlobal('setInterval', setInterval);
defineGlobal('clearTimeout', clearTimeout);
defineGlobal('clearInterval', clearInterval);

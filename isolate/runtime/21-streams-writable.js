// WHATWG Streams: WritableStream, its controller and its writer.
//
// Takes from
//   00-util.js: kPrivate, toDictionary, defineInterface, registerInspect, isObjectLike, requireArgs
//   17-events.js: eventsFragment (AbortController)
//   20-streams-queue.js: markHandled
//   20-streams-queue.js, as the argument `queue`: ValueQueue, newDeferred, promiseCall,
//     optionalMethod, strategyFrom

function makeStreamsWritable(queue) {
const { AbortController } = eventsFragment();
const { ValueQueue, newDeferred, promiseCall, optionalMethod, strategyFrom } = queue;


// WritableStream ---------------------------------------------------------------

class WSState {
  constructor() {
    this.state = 'writable'; // writable | closed | erroring | errored
    this.storedError = undefined;
    this.writer = null;      // WriterState
    this.controller = null;  // WSControllerState
    this.inFlightWrite = null;   // deferred
    this.closeRequest = null;    // deferred
    this.inFlightClose = null;   // deferred
    this.pendingAbort = null;    // { deferred, reason, wasAlreadyErroring }
    this.writeRequests = [];     // deferreds
    this.backpressure = false;
    this.object = null;
  }
}

class WSControllerState {
  constructor(stream, hwm, size) {
    this.stream = stream;
    this.queue = new ValueQueue(); // chunks, and kCloseSentinel last
    this.started = false;
    this.hwm = hwm;
    this.size = size;
    this.writeAlgorithm = null;
    this.closeAlgorithm = null;
    this.abortAlgorithm = null;
    this.abortController = new AbortController();
    this.object = null;
  }
}

class WriterState {
  constructor() {
    this.stream = null;
    this.ready = null;  // deferred
    this.closed = null; // deferred
    this.object = null;
  }
}

const kCloseSentinel = Symbol('close');

function wsCloseQueuedOrInFlight(s) {
  return s.closeRequest !== null || s.inFlightClose !== null;
}

function wsHasOperationMarkedInFlight(s) {
  return s.inFlightWrite !== null || s.inFlightClose !== null;
}

function wsDesiredSize(c) {
  return c.hwm - c.queue.total;
}

function wsGetBackpressure(c) {
  return wsDesiredSize(c) <= 0;
}

function wsUpdateBackpressure(s, backpressure) {
  const writer = s.writer;
  if (writer !== null && backpressure !== s.backpressure) {
    if (backpressure) writer.ready = newDeferred();
    else writer.ready.resolve();
  }
  s.backpressure = backpressure;
}

function wsStartErroring(s, reason) {
  const c = s.controller;
  s.state = 'erroring';
  s.storedError = reason;
  const writer = s.writer;
  if (writer !== null) writerEnsureReadyRejected(writer, reason);
  if (!wsHasOperationMarkedInFlight(s) && c.started) wsFinishErroring(s);
}

function wsFinishErroring(s) {
  s.state = 'errored';
  const c = s.controller;
  c.queue.reset();
  const err = s.storedError;
  for (const d of s.writeRequests) d.reject(err);
  s.writeRequests = [];
  if (s.pendingAbort === null) {
    wsRejectCloseAndClosedIfNeeded(s);
    return;
  }
  const abort = s.pendingAbort;
  s.pendingAbort = null;
  if (abort.wasAlreadyErroring) {
    abort.deferred.reject(err);
    wsRejectCloseAndClosedIfNeeded(s);
    return;
  }
  const abortAlgorithm = c.abortAlgorithm;
  wsClearAlgorithms(c);
  abortAlgorithm(abort.reason).then(() => {
    abort.deferred.resolve();
    wsRejectCloseAndClosedIfNeeded(s);
  }, (e) => {
    abort.deferred.reject(e);
    wsRejectCloseAndClosedIfNeeded(s);
  });
}

function wsRejectCloseAndClosedIfNeeded(s) {
  if (s.closeRequest !== null) {
    s.closeRequest.reject(s.storedError);
    s.closeRequest = null;
  }
  const writer = s.writer;
  if (writer !== null) {
    writer.closed.reject(s.storedError);
    markHandled(writer.closed.promise);
  }
}

function wsDealWithRejection(s, error) {
  if (s.state === 'writable') {
    wsStartErroring(s, error);
    return;
  }
  wsFinishErroring(s);
}

function wsClearAlgorithms(c) {
  c.writeAlgorithm = null;
  c.closeAlgorithm = null;
  c.abortAlgorithm = null;
  c.size = null;
}

function wsAbort(s, reason) {
  if (s.state === 'closed' || s.state === 'errored') return Promise.resolve();
  s.controller.abortController.abort(reason);
  const state = s.state;
  if (state === 'closed' || state === 'errored') return Promise.resolve();
  if (s.pendingAbort !== null) return s.pendingAbort.deferred.promise;
  let wasAlreadyErroring = false;
  if (state === 'erroring') {
    wasAlreadyErroring = true;
    reason = undefined;
  }
  const deferred = newDeferred();
  s.pendingAbort = { deferred, reason, wasAlreadyErroring };
  if (!wasAlreadyErroring) wsStartErroring(s, reason);
  return deferred.promise;
}

function wsClose(s) {
  const state = s.state;
  if (state === 'closed' || state === 'errored') {
    return Promise.reject(new TypeError('This WritableStream is closed or errored.'));
  }
  if (wsCloseQueuedOrInFlight(s)) return Promise.reject(new TypeError('This WritableStream is already closing.'));
  const deferred = newDeferred();
  s.closeRequest = deferred;
  const writer = s.writer;
  if (writer !== null && s.backpressure && state === 'writable') writer.ready.resolve();
  const c = s.controller;
  c.queue.push(kCloseSentinel, 0);
  wsAdvanceQueueIfNeeded(c);
  return deferred.promise;
}

function wsControllerError(c, error) {
  const s = c.stream;
  if (s.state !== 'writable') return;
  wsClearAlgorithms(c);
  wsStartErroring(s, error);
}

function wsControllerErrorIfNeeded(c, error) {
  if (c.stream.state === 'writable') wsControllerError(c, error);
}

function wsAdvanceQueueIfNeeded(c) {
  const s = c.stream;
  if (!c.started || s.inFlightWrite !== null) return;
  if (s.state === 'erroring') {
    wsFinishErroring(s);
    return;
  }
  if (c.queue.length === 0) return;
  const value = c.queue.peek();
  if (value === kCloseSentinel) {
    // Process close.
    s.inFlightClose = s.closeRequest;
    s.closeRequest = null;
    c.queue.shift();
    const closeAlgorithm = c.closeAlgorithm;
    wsClearAlgorithms(c);
    closeAlgorithm().then(() => {
      s.inFlightClose.resolve();
      s.inFlightClose = null;
      if (s.state === 'erroring') {
        s.storedError = undefined;
        if (s.pendingAbort !== null) {
          s.pendingAbort.deferred.resolve();
          s.pendingAbort = null;
        }
      }
      s.state = 'closed';
      if (s.writer !== null) s.writer.closed.resolve();
    }, (e) => {
      s.inFlightClose.reject(e);
      s.inFlightClose = null;
      if (s.pendingAbort !== null) {
        s.pendingAbort.deferred.reject(e);
        s.pendingAbort = null;
      }
      wsDealWithRejection(s, e);
    });
    return;
  }
  // Process write.
  s.inFlightWrite = s.writeRequests.shift();
  c.writeAlgorithm(value).then(() => {
    s.inFlightWrite.resolve();
    s.inFlightWrite = null;
    const state = s.state;
    c.queue.shift();
    if (!wsCloseQueuedOrInFlight(s) && state === 'writable') {
      wsUpdateBackpressure(s, wsGetBackpressure(c));
    }
    wsAdvanceQueueIfNeeded(c);
  }, (e) => {
    if (s.state === 'writable') wsClearAlgorithms(c);
    s.inFlightWrite.reject(e);
    s.inFlightWrite = null;
    wsDealWithRejection(s, e);
  });
}

function wsWrite(s, chunk) {
  const c = s.controller;
  let size = 1;
  if (c.size !== null) {
    try {
      size = c.size(chunk);
    } catch (err) {
      wsControllerErrorIfNeeded(c, err);
      return Promise.reject(err);
    }
  }
  const state = s.state;
  if (state === 'errored' || state === 'erroring') return Promise.reject(s.storedError);
  if (wsCloseQueuedOrInFlight(s) || state === 'closed') {
    return Promise.reject(new TypeError('This WritableStream is closed or closing.'));
  }
  const deferred = newDeferred();
  s.writeRequests.push(deferred);
  try {
    c.queue.push(chunk, size);
  } catch (err) {
    wsControllerErrorIfNeeded(c, err);
    return deferred.promise;
  }
  if (!wsCloseQueuedOrInFlight(s) && s.state === 'writable') {
    wsUpdateBackpressure(s, wsGetBackpressure(c));
  }
  wsAdvanceQueueIfNeeded(c);
  return deferred.promise;
}

function writerEnsureReadyRejected(writer, error) {
  if (writer.ready.settled) writer.ready = newDeferred();
  writer.ready.reject(error);
  markHandled(writer.ready.promise);
}

function acquireWriter(s) {
  if (s.writer !== null) throw new TypeError('This WritableStream is currently locked to a writer.');
  const writer = new WriterState();
  writer.stream = s;
  s.writer = writer;
  writer.ready = newDeferred();
  writer.closed = newDeferred();
  const state = s.state;
  if (state === 'writable') {
    if (!wsCloseQueuedOrInFlight(s) && s.backpressure) {
      // stays pending
    } else {
      writer.ready.resolve();
    }
  } else if (state === 'erroring') {
    writer.ready.reject(s.storedError);
    markHandled(writer.ready.promise);
  } else if (state === 'closed') {
    writer.ready.resolve();
    writer.closed.resolve();
  } else {
    writer.ready.reject(s.storedError);
    markHandled(writer.ready.promise);
    writer.closed.reject(s.storedError);
    markHandled(writer.closed.promise);
  }
  return writer;
}

function writerRelease(writer) {
  const s = writer.stream;
  const err = new TypeError('This writer has been released.');
  writerEnsureReadyRejected(writer, err);
  if (s.state === 'writable' || wsCloseQueuedOrInFlight(s)) {
    writer.closed.reject(err);
  } else {
    writer.closed = newDeferred();
    writer.closed.reject(err);
  }
  markHandled(writer.closed.promise);
  s.writer = null;
  writer.stream = null;
}

let wsStateOf; // (WritableStream) -> WSState
let isWritableStreamObject; // (object) -> boolean

class WritableStream {
  #s;

  constructor(underlyingSink = undefined, strategy = undefined) {
    const s = new WSState();
    s.object = this;
    this.#s = s;
    if (underlyingSink === kPrivate) return;
    const sink = toDictionary(underlyingSink, 'The underlying sink');
    if (sink !== null && sink.type !== undefined) throw new RangeError('Invalid type is specified');
    const { hwm, size } = strategyFrom(strategy, 1);
    const startFn = optionalMethod(sink, 'start', 'underlyingSink');
    const writeFn = optionalMethod(sink, 'write', 'underlyingSink');
    const closeFn = optionalMethod(sink, 'close', 'underlyingSink');
    const abortFn = optionalMethod(sink, 'abort', 'underlyingSink');
    const c = new WSControllerState(s, hwm, size);
    const controller = new WritableStreamDefaultController(kPrivate, c);
    c.object = controller;
    setUpWSController(s, c,
      () => (startFn === undefined ? undefined : startFn.call(sink, controller)),
      (chunk) => promiseCall(sink, writeFn, [chunk, controller]),
      () => promiseCall(sink, closeFn, []),
      (reason) => promiseCall(sink, abortFn, [reason]));
  }

  get locked() {
    return this.#s.writer !== null;
  }

  abort(reason = undefined) {
    const s = this.#s;
    if (s.writer !== null) {
      return Promise.reject(new TypeError('This WritableStream is currently locked to a writer.'));
    }
    return wsAbort(s, reason);
  }

  close() {
    const s = this.#s;
    if (s.writer !== null) {
      return Promise.reject(new TypeError('This WritableStream is currently locked to a writer.'));
    }
    return wsClose(s);
  }

  getWriter() {
    return new WritableStreamDefaultWriter(this);
  }

  static {
    wsStateOf = (w) => w.#s;
    isWritableStreamObject = (v) => #s in v;
  }
}
defineInterface(WritableStream, 'WritableStream');
registerInspect(WritableStream, (w) => ({ locked: w.locked, state: wsStateOf(w).state }));

function isWritableStream(v) {
  return isObjectLike(v) && isWritableStreamObject(v);
}

function setUpWSController(s, c, start, write, close, abort) {
  s.controller = c;
  c.writeAlgorithm = write;
  c.closeAlgorithm = close;
  c.abortAlgorithm = abort;
  wsUpdateBackpressure(s, wsGetBackpressure(c));
  let startResult;
  try {
    startResult = start();
  } catch (err) {
    wsControllerError(c, err);
    throw err;
  }
  Promise.resolve(startResult).then(() => {
    c.started = true;
    wsAdvanceQueueIfNeeded(c);
  }, (e) => {
    c.started = true;
    wsDealWithRejection(s, e);
  });
}

class WritableStreamDefaultController {
  #c;

  constructor(key, c) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#c = c;
  }

  get signal() {
    return this.#c.abortController.signal;
  }

  error(e = undefined) {
    wsControllerErrorIfNeeded(this.#c, e);
  }
}
defineInterface(WritableStreamDefaultController, 'WritableStreamDefaultController');

class WritableStreamDefaultWriter {
  #w;

  constructor(stream) {
    requireArgs(arguments.length, 1, 'constructor', 'WritableStreamDefaultWriter');
    if (!isWritableStream(stream)) {
      throw new TypeError("Failed to construct 'WritableStreamDefaultWriter': parameter 1 is not of type 'WritableStream'.");
    }
    this.#w = acquireWriter(wsStateOf(stream));
    this.#w.object = this;
  }

  get closed() {
    return this.#w.closed.promise;
  }

  get ready() {
    return this.#w.ready.promise;
  }

  get desiredSize() {
    const s = this.#w.stream;
    if (s === null) throw new TypeError('This writer has been released.');
    if (s.state === 'errored' || s.state === 'erroring') return null;
    if (s.state === 'closed') return 0;
    return wsDesiredSize(s.controller);
  }

  abort(reason = undefined) {
    const s = this.#w.stream;
    if (s === null) return Promise.reject(new TypeError('This writer has been released.'));
    return wsAbort(s, reason);
  }

  close() {
    const s = this.#w.stream;
    if (s === null) return Promise.reject(new TypeError('This writer has been released.'));
    return wsClose(s);
  }

  releaseLock() {
    const w = this.#w;
    if (w.stream === null) return;
    writerRelease(w);
  }

  write(chunk = undefined) {
    const s = this.#w.stream;
    if (s === null) return Promise.reject(new TypeError('This writer has been released.'));
    return wsWrite(s, chunk);
  }
}
defineInterface(WritableStreamDefaultWriter, 'WritableStreamDefaultWriter');

return {
  WritableStream, WritableStreamDefaultController, WritableStreamDefaultWriter, WSControllerState,
  wsStateOf, isWritableStream, setUpWSController, wsControllerErrorIfNeeded,
  wsCloseQueuedOrInFlight, wsAbort, wsClose, wsWrite, acquireWriter, writerRelease,
};
}

// WHATWG Streams: ReadableStream (default readers; "bytes" streams are read
// as default streams, without BYOB readers), its controllers, readers and
// async iterator, tee(), pipeTo() and pipeThrough(); and what the rest of
// the runtime reads bodies with (readableStreamReadAll, ...).
//
// The public objects hold one private slot pointing at an internal record;
// the algorithms below follow the standard's names where they map 1:1.
//
// Takes from
//   00-util.js: kPrivate, toDictionary, isObjectLike, defineInterface, registerInspect,
//     requireArgs, emptyBytes, typedArrayKind, isAnyArrayBuffer, concatBytes
//   17-events.js: eventsFragment (AbortSignal)
//   20-streams-queue.js: markHandled
//   20-streams-queue.js, as the argument `queue`: ValueQueue, newDeferred, promiseCall,
//     optionalMethod, strategyFrom, byteLengthSize
//   21-streams-writable.js, as the argument `writable`: isWritableStream, wsStateOf,
//     wsCloseQueuedOrInFlight, wsAbort, wsClose, wsWrite, acquireWriter, writerRelease

function makeStreamsReadable(queue, writable) {
const { AbortSignal } = eventsFragment();
const { ValueQueue, newDeferred, promiseCall, optionalMethod, strategyFrom, byteLengthSize } = queue;
const { isWritableStream, wsStateOf, wsCloseQueuedOrInFlight, wsAbort, wsClose, wsWrite,
  acquireWriter, writerRelease } = writable;


// ReadableStream ---------------------------------------------------------------

class RSState {
  constructor() {
    this.state = 'readable';
    this.reader = null;      // ReaderState
    this.storedError = undefined;
    this.disturbed = false;
    this.controller = null;  // RSControllerState
    this.object = null;      // the public ReadableStream
    // The byte count a FixedLengthStream's readable side announces (sent
    // as Content-Length), or -1.
    this.expectedLength = -1;
  }
}

class RSControllerState {
  constructor(stream, hwm, size) {
    this.stream = stream;
    this.queue = new ValueQueue();
    this.started = false;
    this.closeRequested = false;
    this.pulling = false;
    this.pullAgain = false;
    this.hwm = hwm;
    this.size = size;
    this.pullAlgorithm = null;   // () -> promise
    this.cancelAlgorithm = null; // (reason) -> promise
    this.object = null;          // the public controller
  }
}

class ReaderState {
  constructor() {
    this.stream = null;
    this.readRequests = [];
    this.closed = null; // deferred
    this.object = null;
  }
}

class PromiseReadRequest {
  constructor(resolve, reject) {
    this.resolve = resolve;
    this.reject = reject;
  }

  chunk(value) {
    this.resolve({ value, done: false });
  }

  close() {
    this.resolve({ value: undefined, done: true });
  }

  error(e) {
    this.reject(e);
  }
}

function rsCanCloseOrEnqueue(c) {
  return !c.closeRequested && c.stream.state === 'readable';
}

function rsDesiredSize(c) {
  const state = c.stream.state;
  if (state === 'errored') return null;
  if (state === 'closed') return 0;
  return c.hwm - c.queue.total;
}

function rsShouldCallPull(c) {
  if (!rsCanCloseOrEnqueue(c) || !c.started) return false;
  const stream = c.stream;
  if (stream.reader !== null && stream.reader.readRequests.length > 0) return true;
  return rsDesiredSize(c) > 0;
}

function rsCallPullIfNeeded(c) {
  if (!rsShouldCallPull(c)) return;
  if (c.pulling) {
    c.pullAgain = true;
    return;
  }
  c.pulling = true;
  c.pullAlgorithm().then(() => {
    c.pulling = false;
    if (c.pullAgain) {
      c.pullAgain = false;
      rsCallPullIfNeeded(c);
    }
  }, (e) => rsControllerError(c, e));
}

function rsClearAlgorithms(c) {
  c.pullAlgorithm = null;
  c.cancelAlgorithm = null;
  c.size = null;
}

function rsControllerClose(c) {
  if (!rsCanCloseOrEnqueue(c)) return;
  c.closeRequested = true;
  if (c.queue.length === 0) {
    rsClearAlgorithms(c);
    rsClose(c.stream);
  }
}

function rsControllerEnqueue(c, chunk) {
  if (!rsCanCloseOrEnqueue(c)) return;
  const stream = c.stream;
  if (stream.reader !== null && stream.reader.readRequests.length > 0) {
    stream.reader.readRequests.shift().chunk(chunk);
  } else {
    let size = 1;
    try {
      if (c.size !== null) size = c.size(chunk);
      c.queue.push(chunk, size);
    } catch (err) {
      rsControllerError(c, err);
      throw err;
    }
  }
  rsCallPullIfNeeded(c);
}

function rsControllerError(c, e) {
  if (c.stream.state !== 'readable') return;
  c.queue.reset();
  rsClearAlgorithms(c);
  rsError(c.stream, e);
}

function rsClose(stream) {
  stream.state = 'closed';
  const reader = stream.reader;
  if (reader === null) return;
  reader.closed.resolve();
  const requests = reader.readRequests;
  reader.readRequests = [];
  for (const r of requests) r.close();
}

function rsError(stream, e) {
  stream.state = 'errored';
  stream.storedError = e;
  const reader = stream.reader;
  if (reader === null) return;
  reader.closed.reject(e);
  markHandled(reader.closed.promise);
  const requests = reader.readRequests;
  reader.readRequests = [];
  for (const r of requests) r.error(e);
}

function rsCancel(stream, reason) {
  stream.disturbed = true;
  if (stream.state === 'closed') return Promise.resolve();
  if (stream.state === 'errored') return Promise.reject(stream.storedError);
  rsClose(stream);
  const c = stream.controller;
  c.queue.reset();
  const cancel = c.cancelAlgorithm;
  rsClearAlgorithms(c);
  return (cancel === null ? Promise.resolve() : cancel(reason)).then(() => undefined);
}

function rsPullSteps(c, request) {
  const stream = c.stream;
  if (c.queue.length > 0) {
    const chunk = c.queue.shift();
    if (c.closeRequested && c.queue.length === 0) {
      rsClearAlgorithms(c);
      rsClose(stream);
    } else {
      rsCallPullIfNeeded(c);
    }
    request.chunk(chunk);
    return;
  }
  stream.reader.readRequests.push(request);
  rsCallPullIfNeeded(c);
}

function readerRead(reader, request) {
  const stream = reader.stream;
  stream.disturbed = true;
  if (stream.state === 'closed') request.close();
  else if (stream.state === 'errored') request.error(stream.storedError);
  else rsPullSteps(stream.controller, request);
}

function readerReadPromise(reader) {
  return new Promise((resolve, reject) => readerRead(reader, new PromiseReadRequest(resolve, reject)));
}

function acquireReader(stream) {
  if (stream.reader !== null) throw new TypeError('This ReadableStream is currently locked to a reader.');
  const reader = new ReaderState();
  reader.stream = stream;
  stream.reader = reader;
  reader.closed = newDeferred();
  if (stream.state === 'closed') {
    reader.closed.resolve();
  } else if (stream.state === 'errored') {
    reader.closed.reject(stream.storedError);
    markHandled(reader.closed.promise);
  }
  return reader;
}

function readerRelease(reader) {
  const stream = reader.stream;
  const err = new TypeError('This ReadableStream reader has been released.');
  if (stream.state === 'readable') {
    reader.closed.reject(err);
  } else {
    reader.closed = newDeferred();
    reader.closed.reject(err);
  }
  markHandled(reader.closed.promise);
  stream.reader = null;
  reader.stream = null;
  const requests = reader.readRequests;
  reader.readRequests = [];
  for (const r of requests) r.error(err);
}

function setUpRSController(stream, c, start, pull, cancel) {
  stream.controller = c;
  c.pullAlgorithm = pull;
  c.cancelAlgorithm = cancel;
  let startResult;
  try {
    startResult = start();
  } catch (err) {
    rsControllerError(c, err);
    throw err;
  }
  Promise.resolve(startResult).then(() => {
    c.started = true;
    rsCallPullIfNeeded(c);
  }, (e) => rsControllerError(c, e));
}

let rsStateOf;        // (ReadableStream) -> RSState
let isReadableStreamObject; // (object) -> boolean
let newReadableStream; // (start, pull, cancel, hwm, size) -> ReadableStream

class ReadableStream {
  #s;

  constructor(underlyingSource = undefined, strategy = undefined) {
    const stream = new RSState();
    stream.object = this;
    this.#s = stream;
    if (underlyingSource === kPrivate) return;
    const source = toDictionary(underlyingSource, 'The underlying source');
    const type = source === null || source.type === undefined ? undefined : `${source.type}`;
    if (type !== undefined && type !== 'bytes') {
      throw new TypeError(`Failed to construct 'ReadableStream': The provided value '${type}' is not a valid enum value of type ReadableStreamType.`);
    }
    const { hwm, size } = strategyFrom(strategy, type === 'bytes' ? 0 : 1);
    if (type === 'bytes' && size !== null) {
      throw new RangeError('A byte stream cannot have a size function in its queuing strategy.');
    }
    const startFn = optionalMethod(source, 'start', 'underlyingSource');
    const pullFn = optionalMethod(source, 'pull', 'underlyingSource');
    const cancelFn = optionalMethod(source, 'cancel', 'underlyingSource');
    // A byte stream's queue is measured in bytes.
    const c = new RSControllerState(stream, hwm, type === 'bytes' ? byteLengthSize : size);
    const controller = type === 'bytes' ? new ReadableByteStreamController(kPrivate, c)
      : new ReadableStreamDefaultController(kPrivate, c);
    c.object = controller;
    setUpRSController(stream, c,
      () => (startFn === undefined ? undefined : startFn.call(source, controller)),
      () => promiseCall(source, pullFn, [controller]),
      (reason) => promiseCall(source, cancelFn, [reason]));
  }

  static from(asyncIterable) {
    if (isReadableStream(asyncIterable)) return asyncIterable;
    let iterator;
    const method = asyncIterable == null ? undefined
      : asyncIterable[Symbol.asyncIterator] ?? asyncIterable[Symbol.iterator];
    if (typeof method !== 'function') {
      throw new TypeError("Failed to execute 'from' on 'ReadableStream': The provided value is not iterable.");
    }
    iterator = method.call(asyncIterable);
    if (!isObjectLike(iterator)) throw new TypeError('The iterator method must return an object.');
    const next = iterator.next;
    return newReadableStream(() => undefined, (c) => promiseCall(iterator, next, [])
      .then((result) => {
        if (!isObjectLike(result)) throw new TypeError('The iterator result must be an object.');
        return Promise.resolve(result.value).then((value) => {
          if (result.done) rsControllerClose(c);
          else rsControllerEnqueue(c, value);
        });
      }), (reason) => {
      const ret = iterator.return;
      if (ret === undefined || ret === null) return Promise.resolve();
      return promiseCall(iterator, ret, [reason]).then((result) => {
        if (!isObjectLike(result)) throw new TypeError('The iterator result must be an object.');
      });
    }, 0, null);
  }

  get locked() {
    return this.#s.reader !== null;
  }

  cancel(reason = undefined) {
    const stream = this.#s;
    if (stream.reader !== null) {
      return Promise.reject(new TypeError('This ReadableStream is currently locked to a reader.'));
    }
    return rsCancel(stream, reason);
  }

  getReader(options = undefined) {
    const opts = toDictionary(options, 'The options');
    if (opts !== null && opts.mode !== undefined) {
      const mode = `${opts.mode}`;
      if (mode !== 'byob') {
        throw new TypeError(`Failed to execute 'getReader' on 'ReadableStream': The provided value '${mode}' is not a valid enum value of type ReadableStreamReaderMode.`);
      }
      throw new TypeError('BYOB readers are not supported; use a default reader (getReader()).');
    }
    return new ReadableStreamDefaultReader(this);
  }

  tee() {
    return readableStreamTee(this);
  }

  pipeTo(destination, options = undefined) {
    try {
      if (!isWritableStream(destination)) {
        throw new TypeError("Failed to execute 'pipeTo' on 'ReadableStream': parameter 1 is not of type 'WritableStream'.");
      }
      const opts = pipeOptions(options);
      if (this.locked) throw new TypeError('This ReadableStream is currently locked to a reader.');
      if (destination.locked) throw new TypeError('This WritableStream is currently locked to a writer.');
      return pipeStreams(this.#s, wsStateOf(destination), opts);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  pipeThrough(transform, options = undefined) {
    if (!isObjectLike(transform)) throw new TypeError('pipeThrough() needs a { readable, writable } pair.');
    const { readable, writable } = transform;
    if (!isReadableStream(readable)) throw new TypeError('pipeThrough(): transform.readable is not a ReadableStream.');
    if (!isWritableStream(writable)) throw new TypeError('pipeThrough(): transform.writable is not a WritableStream.');
    const opts = pipeOptions(options);
    if (this.locked) throw new TypeError('This ReadableStream is currently locked to a reader.');
    if (writable.locked) throw new TypeError('This WritableStream is currently locked to a writer.');
    markHandled(pipeStreams(this.#s, wsStateOf(writable), opts));
    return readable;
  }

  values(options = undefined) {
    const opts = toDictionary(options, 'The options');
    return new ReadableStreamAsyncIterator(kPrivate, this.#s, opts !== null && !!opts.preventCancel);
  }

  static {
    rsStateOf = (s) => s.#s;
    isReadableStreamObject = (v) => #s in v;
  }
}
Object.defineProperty(ReadableStream.prototype, Symbol.asyncIterator, {
  value: ReadableStream.prototype.values, writable: true, configurable: true,
});
defineInterface(ReadableStream, 'ReadableStream');
registerInspect(ReadableStream, (s) => ({ locked: s.locked, state: rsStateOf(s).state }));

newReadableStream = (start, pull, cancel, hwm, size) => {
  const object = new ReadableStream(kPrivate);
  const stream = rsStateOf(object);
  const c = new RSControllerState(stream, hwm, size);
  setUpRSController(stream, c, () => start(c), () => pull(c), cancel);
  return object;
};

function isReadableStream(v) {
  return isObjectLike(v) && isReadableStreamObject(v);
}

class ReadableStreamDefaultController {
  #c;

  constructor(key, c) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#c = c;
  }

  get desiredSize() {
    return rsDesiredSize(this.#c);
  }

  close() {
    const c = this.#c;
    if (!rsCanCloseOrEnqueue(c)) throw new TypeError('The stream is not in a state that permits close.');
    rsControllerClose(c);
  }

  enqueue(chunk = undefined) {
    const c = this.#c;
    if (!rsCanCloseOrEnqueue(c)) throw new TypeError('The stream is not in a state that permits enqueue.');
    rsControllerEnqueue(c, chunk);
  }

  error(e = undefined) {
    rsControllerError(this.#c, e);
  }
}
defineInterface(ReadableStreamDefaultController, 'ReadableStreamDefaultController');

class ReadableByteStreamController {
  #c;

  constructor(key, c) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#c = c;
  }

  get byobRequest() {
    return null;
  }

  get desiredSize() {
    return rsDesiredSize(this.#c);
  }

  close() {
    const c = this.#c;
    if (!rsCanCloseOrEnqueue(c)) throw new TypeError('The stream is not in a state that permits close.');
    rsControllerClose(c);
  }

  enqueue(chunk) {
    const c = this.#c;
    if (!ArrayBuffer.isView(chunk)) {
      throw new TypeError("Failed to execute 'enqueue' on 'ReadableByteStreamController': parameter 1 is not of type 'ArrayBufferView'.");
    }
    if (chunk.byteLength === 0) throw new TypeError('chunk must have non-zero byteLength');
    if (!rsCanCloseOrEnqueue(c)) throw new TypeError('The stream is not in a state that permits enqueue.');
    // The standard transfers the buffer; a copy gives the same isolation.
    const copy = new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength).slice();
    rsControllerEnqueue(c, copy);
  }

  error(e = undefined) {
    rsControllerError(this.#c, e);
  }
}
defineInterface(ReadableByteStreamController, 'ReadableByteStreamController');

class ReadableStreamDefaultReader {
  #r;

  constructor(stream) {
    requireArgs(arguments.length, 1, 'constructor', 'ReadableStreamDefaultReader');
    if (!isReadableStream(stream)) {
      throw new TypeError("Failed to construct 'ReadableStreamDefaultReader': parameter 1 is not of type 'ReadableStream'.");
    }
    this.#r = acquireReader(rsStateOf(stream));
    this.#r.object = this;
  }

  get closed() {
    return this.#r.closed.promise;
  }

  read() {
    const reader = this.#r;
    if (reader.stream === null) {
      return Promise.reject(new TypeError('This readable stream reader has been released.'));
    }
    return readerReadPromise(reader);
  }

  cancel(reason = undefined) {
    const reader = this.#r;
    if (reader.stream === null) {
      return Promise.reject(new TypeError('This readable stream reader has been released.'));
    }
    return rsCancel(reader.stream, reason);
  }

  releaseLock() {
    const reader = this.#r;
    if (reader.stream === null) return;
    readerRelease(reader);
  }
}
defineInterface(ReadableStreamDefaultReader, 'ReadableStreamDefaultReader');

const AsyncIteratorPrototype = Object.getPrototypeOf(Object.getPrototypeOf(
  Object.getPrototypeOf((async function* () {})())));

class ReadableStreamAsyncIterator {
  #reader;
  #preventCancel;
  #ongoing = null;
  #finished = false;

  constructor(key, stream, preventCancel) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#reader = acquireReader(stream);
    this.#preventCancel = preventCancel;
  }

  next() {
    const run = () => this.#next();
    const p = this.#ongoing === null ? run() : this.#ongoing.then(run, run);
    this.#ongoing = p.then(() => undefined, () => undefined);
    return p;
  }

  #next() {
    if (this.#finished) return Promise.resolve({ value: undefined, done: true });
    const reader = this.#reader;
    return readerReadPromise(reader).then((result) => {
      if (result.done) {
        this.#finished = true;
        readerRelease(reader);
      }
      return result;
    }, (err) => {
      this.#finished = true;
      if (reader.stream !== null) readerRelease(reader);
      throw err;
    });
  }

  return(value = undefined) {
    const run = () => {
      if (this.#finished) return Promise.resolve({ value, done: true });
      this.#finished = true;
      const reader = this.#reader;
      if (reader.stream === null) return Promise.resolve({ value, done: true });
      if (!this.#preventCancel) {
        const stream = reader.stream;
        const result = rsCancel(stream, value);
        readerRelease(reader);
        return result.then(() => ({ value, done: true }));
      }
      readerRelease(reader);
      return Promise.resolve({ value, done: true });
    };
    return this.#ongoing === null ? run() : this.#ongoing.then(run, run);
  }
}
Object.setPrototypeOf(ReadableStreamAsyncIterator.prototype, AsyncIteratorPrototype);

// ReadableStreamDefaultTee: both branches see the same chunks.
function readableStreamTee(object) {
  const stream = rsStateOf(object);
  const reader = acquireReader(stream);
  let reading = false;
  let readAgain = false;
  let canceled1 = false;
  let canceled2 = false;
  let reason1;
  let reason2;
  let c1 = null;
  let c2 = null;
  const cancelled = newDeferred();
  const pull = () => {
    if (reading) {
      readAgain = true;
      return Promise.resolve();
    }
    reading = true;
    readerRead(reader, {
      chunk(value) {
        queueMicrotaskInternal(() => {
          readAgain = false;
          if (!canceled1) rsControllerEnqueue(c1, value);
          if (!canceled2) rsControllerEnqueue(c2, value);
          reading = false;
          if (readAgain) pull();
        });
      },
      close() {
        reading = false;
        if (!canceled1) rsControllerClose(c1);
        if (!canceled2) rsControllerClose(c2);
        if (!canceled1 || !canceled2) cancelled.resolve();
      },
      error() {
        reading = false;
      },
    });
    return Promise.resolve();
  };
  const cancelBranch = (first) => (reason) => {
    if (first) {
      canceled1 = true;
      reason1 = reason;
    } else {
      canceled2 = true;
      reason2 = reason;
    }
    if (canceled1 && canceled2) cancelled.resolve(rsCancel(stream, [reason1, reason2]));
    return cancelled.promise;
  };
  const branch1 = newReadableStream((c) => {
    c1 = c;
  }, pull, cancelBranch(true), 1, null);
  const branch2 = newReadableStream((c) => {
    c2 = c;
  }, pull, cancelBranch(false), 1, null);
  reader.closed.promise.then(undefined, (e) => {
    rsControllerError(c1, e);
    rsControllerError(c2, e);
    if (!canceled1 || !canceled2) cancelled.resolve();
  });
  return [branch1, branch2];
}

function queueMicrotaskInternal(fn) {
  resolvedPromiseInternal.then(fn);
}
const resolvedPromiseInternal = Promise.resolve();

// Helpers the Body mixin uses ---------------------------------------------------

function readableStreamDisturbed(object) {
  return rsStateOf(object).disturbed;
}

// A stream of one chunk holding a copy of `u8` (none when empty), closed.
function readableStreamFromBytes(u8) {
  const object = new ReadableStream(kPrivate);
  const stream = rsStateOf(object);
  const c = new RSControllerState(stream, 0, null);
  stream.controller = c;
  if (u8.length > 0) c.queue.push(u8.slice(), u8.length);
  c.closeRequested = true;
  c.started = true;
  if (u8.length === 0) stream.state = 'closed';
  return object;
}

// A body stream that has been read already.
function readableStreamUsed() {
  const object = readableStreamFromBytes(emptyBytes);
  rsStateOf(object).disturbed = true;
  return object;
}

function chunkToBytes(chunk) {
  if (ArrayBuffer.isView(chunk)) {
    return typedArrayKind.call(chunk) === 'Uint8Array' ? chunk
      : new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength);
  }
  if (isAnyArrayBuffer(chunk)) return new Uint8Array(chunk);
  if (typeof chunk === 'string') {
    throw new TypeError('This ReadableStream produced a string chunk where bytes were expected; ' +
      'encode strings with TextEncoder (or pipe them through a TextEncoderStream).');
  }
  throw new TypeError('This ReadableStream did not return bytes.');
}

// Reads a whole stream into one Uint8Array (which may be the only chunk).
async function readableStreamReadAll(object) {
  const stream = rsStateOf(object);
  const c = stream.controller;
  if (stream.reader === null && stream.state === 'readable' && c.closeRequested) {
    // Everything is queued already (a body made from bytes): no reads needed.
    stream.disturbed = true;
    const chunks = [];
    let total = 0;
    while (c.queue.length > 0) {
      const bytes = chunkToBytes(c.queue.shift());
      chunks.push(bytes);
      total += bytes.length;
    }
    rsClearAlgorithms(c);
    rsClose(stream);
    return chunks.length === 0 ? emptyBytes : concatBytes(chunks, total);
  }
  const reader = acquireReader(stream);
  const chunks = [];
  let total = 0;
  try {
    for (;;) {
      const result = await readerReadPromise(reader);
      if (result.done) break;
      let bytes;
      try {
        bytes = chunkToBytes(result.value);
      } catch (err) {
        rsCancel(stream, err).then(undefined, () => {});
        throw err;
      }
      chunks.push(bytes);
      total += bytes.length;
    }
  } finally {
    if (reader.stream !== null) readerRelease(reader);
  }
  return chunks.length === 0 ? emptyBytes : concatBytes(chunks, total);
}


// pipeTo: read, write, repeat; with the standard's close/abort/cancel rules.
function pipeOptions(options) {
  const o = toDictionary(options, 'The options');
  const signal = o === null ? undefined : o.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError("Failed to execute 'pipeTo' on 'ReadableStream': member signal is not of type AbortSignal.");
  }
  return {
    preventClose: o !== null && !!o.preventClose,
    preventAbort: o !== null && !!o.preventAbort,
    preventCancel: o !== null && !!o.preventCancel,
    signal,
  };
}

function pipeStreams(source, dest, opts) {
  const reader = acquireReader(source);
  const writer = acquireWriter(dest);
  source.disturbed = true;
  let shuttingDown = false;
  let currentWrite = Promise.resolve();
  const done = newDeferred();

  const finalize = (isError, error) => {
    writerRelease(writer);
    if (reader.stream !== null) readerRelease(reader);
    if (opts.signal !== undefined) opts.signal.removeEventListener('abort', onAbort);
    if (isError) done.reject(error);
    else done.resolve();
  };
  const waitWrites = () => {
    const last = currentWrite;
    return last.then(() => (last === currentWrite ? undefined : waitWrites()), () => undefined);
  };
  const shutdown = (action, isError, error) => {
    if (shuttingDown) return;
    shuttingDown = true;
    const wait = dest.state === 'writable' && !wsCloseQueuedOrInFlight(dest) ? waitWrites() : Promise.resolve();
    wait.then(() => (action === null ? undefined : action())).then(
      () => finalize(isError, error),
      (e) => finalize(true, e));
  };
  const onAbort = () => {
    const error = opts.signal.reason;
    const actions = [];
    if (!opts.preventAbort) {
      actions.push(() => (dest.state === 'writable' ? wsAbort(dest, error) : Promise.resolve()));
    }
    if (!opts.preventCancel) {
      actions.push(() => (source.state === 'readable' ? rsCancel(source, error) : Promise.resolve()));
    }
    shutdown(() => Promise.all(actions.map((a) => a())), true, error);
  };
  if (opts.signal !== undefined) {
    if (opts.signal.aborted) {
      onAbort();
      return done.promise;
    }
    opts.signal.addEventListener('abort', onAbort);
  }

  const checkStates = () => {
    if (source.state === 'errored') {
      if (!opts.preventAbort) shutdown(() => wsAbort(dest, source.storedError), true, source.storedError);
      else shutdown(null, true, source.storedError);
      return true;
    }
    if (dest.state === 'errored' || dest.state === 'erroring') {
      if (!opts.preventCancel) shutdown(() => rsCancel(source, dest.storedError), true, dest.storedError);
      else shutdown(null, true, dest.storedError);
      return true;
    }
    if (source.state === 'closed') {
      if (!opts.preventClose) {
        shutdown(() => (wsCloseQueuedOrInFlight(dest) || dest.state === 'closed'
          ? Promise.resolve() : wsClose(dest)), false);
      } else {
        shutdown(null, false);
      }
      return true;
    }
    if (wsCloseQueuedOrInFlight(dest) || dest.state === 'closed') {
      const err = new TypeError('The destination writable stream closed before all data could be piped to it.');
      if (!opts.preventCancel) shutdown(() => rsCancel(source, err), true, err);
      else shutdown(null, true, err);
      return true;
    }
    return false;
  };

  const step = () => {
    if (shuttingDown || checkStates()) return;
    writer.ready.promise.then(() => {
      if (shuttingDown || checkStates()) return;
      readerRead(reader, {
        chunk(value) {
          currentWrite = wsWrite(dest, value);
          markHandled(currentWrite);
          step();
        },
        close() {
          checkStates();
        },
        error() {
          checkStates();
        },
      });
    }, () => checkStates());
  };
  // Errors that arrive while waiting are noticed through these.
  reader.closed.promise.then(() => checkStates(), () => checkStates());
  writer.closed.promise.then(() => checkStates(), () => checkStates());
  step();
  return done.promise;
}

return {
  ReadableStream, ReadableStreamDefaultController, ReadableByteStreamController,
  ReadableStreamDefaultReader, RSControllerState, rsStateOf, isReadableStream, setUpRSController,
  rsCanCloseOrEnqueue, rsDesiredSize, rsShouldCallPull, rsControllerClose, rsControllerEnqueue,
  rsControllerError, rsCancel, readerReadPromise, acquireReader, readerRelease, readableStreamTee,
  readableStreamDisturbed, readableStreamFromBytes, readableStreamUsed, chunkToBytes,
  readableStreamReadAll,
};
}

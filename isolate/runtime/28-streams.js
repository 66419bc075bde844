// WHATWG Streams: ReadableStream (default readers; "bytes" streams are read
// as default streams, without BYOB readers), WritableStream, TransformStream,
// the queuing strategies, TextEncoderStream and TextDecoderStream.
//
// The public objects hold one private slot pointing at an internal record;
// the algorithms below follow the standard's names where they map 1:1.

function markHandled(promise) {
  promise.then(undefined, () => {});
  return promise;
}

// Made the first time a worker touches a stream (lazyFragment, 00-util.js):
// a body that is a string or bytes never does. The body is not indented.
let streamsMade = false;
const streamsFragment = lazyFragment(() => {
streamsMade = true;
const { AbortController, AbortSignal } = eventsFragment();

// A promise with its resolving functions, and whether it has settled.
function newDeferred() {
  const d = { promise: null, resolve: null, reject: null, settled: false };
  d.promise = new Promise((res, rej) => {
    d.resolve = (v) => {
      d.settled = true;
      res(v);
    };
    d.reject = (e) => {
      d.settled = true;
      rej(e);
    };
  });
  return d;
}

// Calls method `name` of a tenant-supplied object (an underlying source,
// sink or transformer) and returns a promise of its result.
function promiseCall(obj, fn, args) {
  if (fn === undefined) return Promise.resolve();
  try {
    return Promise.resolve(fn.apply(obj, args));
  } catch (err) {
    return Promise.reject(err);
  }
}

function optionalMethod(obj, name, what) {
  if (obj === null) return undefined;
  const fn = obj[name];
  if (fn === undefined || fn === null) return undefined;
  if (typeof fn !== 'function') throw new TypeError(`${what}.${name} must be a function.`);
  return fn;
}

function strategyFrom(strategy, defaultHWM) {
  const s = toDictionary(strategy, 'The queuing strategy');
  let hwm = defaultHWM;
  let size = null;
  if (s !== null) {
    if (s.highWaterMark !== undefined) {
      hwm = Number(s.highWaterMark);
      if (Number.isNaN(hwm) || hwm < 0) throw new RangeError('The highWaterMark must be a non-negative number.');
    }
    if (s.size !== undefined) {
      if (typeof s.size !== 'function') throw new TypeError('The queuing strategy size must be a function.');
      const fn = s.size;
      size = (chunk) => fn(chunk);
    }
  }
  return { hwm, size };
}

// A queue of [chunk, size] with O(1) dequeue.
class ValueQueue {
  constructor() {
    this.items = [];
    this.sizes = [];
    this.head = 0;
    this.total = 0;
  }

  get length() {
    return this.items.length - this.head;
  }

  push(chunk, size) {
    if (typeof size !== 'number' || Number.isNaN(size) || size < 0 || size === Infinity) {
      throw new RangeError('The return value of a queuing strategy size function must be a finite, non-negative number.');
    }
    this.items.push(chunk);
    this.sizes.push(size);
    this.total += size;
  }

  shift() {
    const chunk = this.items[this.head];
    this.total -= this.sizes[this.head];
    if (this.total < 0) this.total = 0;
    this.items[this.head] = undefined;
    this.head++;
    if (this.head === this.items.length) {
      this.items = [];
      this.sizes = [];
      this.head = 0;
    } else if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.sizes = this.sizes.slice(this.head);
      this.head = 0;
    }
    return chunk;
  }

  peek() {
    return this.items[this.head];
  }

  reset() {
    this.items = [];
    this.sizes = [];
    this.head = 0;
    this.total = 0;
  }
}

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

// TransformStream ----------------------------------------------------------------

class TSState {
  constructor() {
    this.readable = null;     // RSState
    this.readableController = null;
    this.writable = null;     // WSState
    this.backpressure = false;
    this.backpressureChange = null; // deferred
    this.transformAlgorithm = null;
    this.flushAlgorithm = null;
    this.cancelAlgorithm = null;
    this.finish = null;       // deferred of flush/cancel, once started
    this.object = null;       // the TransformStreamDefaultController
  }
}

function tsSetBackpressure(t, backpressure) {
  if (t.backpressureChange !== null) t.backpressureChange.resolve();
  t.backpressureChange = newDeferred();
  t.backpressure = backpressure;
}

function tsError(t, e) {
  rsControllerError(t.readableController, e);
  tsErrorWritableAndUnblockWrite(t, e);
}

function tsErrorWritableAndUnblockWrite(t, e) {
  t.transformAlgorithm = null;
  t.flushAlgorithm = null;
  t.cancelAlgorithm = null;
  wsControllerErrorIfNeeded(t.writable.controller, e);
  if (t.backpressure) tsSetBackpressure(t, false);
}

function tsEnqueue(t, chunk) {
  const c = t.readableController;
  if (!rsCanCloseOrEnqueue(c)) throw new TypeError('The readable side of this TransformStream is not in a state that permits enqueue.');
  try {
    rsControllerEnqueue(c, chunk);
  } catch (err) {
    tsErrorWritableAndUnblockWrite(t, err);
    throw t.readable.storedError;
  }
  if (!rsShouldCallPull(c) !== t.backpressure) tsSetBackpressure(t, true);
}

function tsTerminate(t) {
  rsControllerClose(t.readableController);
  tsErrorWritableAndUnblockWrite(t, new TypeError('The TransformStream has been terminated.'));
}

function tsPerformTransform(t, chunk) {
  return t.transformAlgorithm(chunk).then(undefined, (r) => {
    tsError(t, r);
    throw r;
  });
}

class TransformStream {
  #t;
  #readable = null;
  #writable = null;

  constructor(transformer = undefined, writableStrategy = undefined, readableStrategy = undefined) {
    const tr = toDictionary(transformer, 'The transformer');
    if (tr !== null && tr.readableType !== undefined) throw new RangeError('Invalid readableType specified');
    if (tr !== null && tr.writableType !== undefined) throw new RangeError('Invalid writableType specified');
    const ws = strategyFrom(writableStrategy, 1);
    const rs = strategyFrom(readableStrategy, 0);
    const startFn = optionalMethod(tr, 'start', 'transformer');
    const transformFn = optionalMethod(tr, 'transform', 'transformer');
    const flushFn = optionalMethod(tr, 'flush', 'transformer');
    const cancelFn = optionalMethod(tr, 'cancel', 'transformer');
    const t = new TSState();
    this.#t = t;
    const controller = new TransformStreamDefaultController(kPrivate, t);
    t.object = controller;
    t.transformAlgorithm = transformFn === undefined
      ? (chunk) => {
        try {
          tsEnqueue(t, chunk);
          return Promise.resolve();
        } catch (err) {
          return Promise.reject(err);
        }
      }
      : (chunk) => promiseCall(tr, transformFn, [chunk, controller]);
    t.flushAlgorithm = () => promiseCall(tr, flushFn, [controller]);
    t.cancelAlgorithm = (reason) => promiseCall(tr, cancelFn, [reason]);
    const start = newDeferred();
    this.#setUp(t, start.promise, ws, rs);
    try {
      start.resolve(startFn === undefined ? undefined : startFn.call(tr, controller));
    } catch (err) {
      start.reject(err);
      throw err;
    }
  }

  #setUp(t, startPromise, ws, rs) {
    const writableObject = new WritableStream(kPrivate);
    const writable = wsStateOf(writableObject);
    t.writable = writable;
    const wc = new WSControllerState(writable, ws.hwm, ws.size);
    wc.object = new WritableStreamDefaultController(kPrivate, wc);
    setUpWSController(writable, wc, () => startPromise,
      (chunk) => {
        if (t.backpressure) {
          return t.backpressureChange.promise.then(() => {
            if (writable.state === 'erroring') throw writable.storedError;
            return tsPerformTransform(t, chunk);
          });
        }
        return tsPerformTransform(t, chunk);
      },
      () => {
        if (t.finish !== null) return t.finish.promise;
        t.finish = newDeferred();
        const flush = t.flushAlgorithm;
        t.transformAlgorithm = null;
        t.flushAlgorithm = null;
        t.cancelAlgorithm = null;
        flush().then(() => {
          if (t.readable.state === 'errored') {
            t.finish.reject(t.readable.storedError);
          } else {
            rsControllerClose(t.readableController);
            t.finish.resolve();
          }
        }, (r) => {
          rsControllerError(t.readableController, r);
          t.finish.reject(r);
        });
        return t.finish.promise;
      },
      (reason) => {
        if (t.finish !== null) return t.finish.promise;
        t.finish = newDeferred();
        const cancel = t.cancelAlgorithm;
        t.transformAlgorithm = null;
        t.flushAlgorithm = null;
        t.cancelAlgorithm = null;
        cancel(reason).then(() => {
          if (t.readable.state === 'errored') {
            t.finish.reject(t.readable.storedError);
          } else {
            rsControllerError(t.readableController, reason);
            t.finish.resolve();
          }
        }, (r) => {
          rsControllerError(t.readableController, r);
          t.finish.reject(r);
        });
        return t.finish.promise;
      });
    const readableObject = new ReadableStream(kPrivate);
    const readable = rsStateOf(readableObject);
    t.readable = readable;
    const rc = new RSControllerState(readable, rs.hwm, rs.size);
    t.readableController = rc;
    rc.object = new ReadableStreamDefaultController(kPrivate, rc);
    setUpRSController(readable, rc, () => startPromise,
      () => {
        tsSetBackpressure(t, false);
        return t.backpressureChange.promise;
      },
      (reason) => {
        if (t.finish !== null) return t.finish.promise;
        t.finish = newDeferred();
        const cancel = t.cancelAlgorithm;
        t.transformAlgorithm = null;
        t.flushAlgorithm = null;
        t.cancelAlgorithm = null;
        cancel(reason).then(() => {
          if (writable.state === 'errored') {
            t.finish.reject(writable.storedError);
          } else {
            wsControllerErrorIfNeeded(wc, reason);
            if (t.backpressure) tsSetBackpressure(t, false);
            t.finish.resolve();
          }
        }, (r) => {
          wsControllerErrorIfNeeded(wc, r);
          if (t.backpressure) tsSetBackpressure(t, false);
          t.finish.reject(r);
        });
        return t.finish.promise;
      });
    tsSetBackpressure(t, true);
    this.#readable = readableObject;
    this.#writable = writableObject;
  }

  get readable() {
    return this.#readable;
  }

  get writable() {
    return this.#writable;
  }
}
defineInterface(TransformStream, 'TransformStream');

class TransformStreamDefaultController {
  #t;

  constructor(key, t) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#t = t;
  }

  get desiredSize() {
    return rsDesiredSize(this.#t.readableController);
  }

  enqueue(chunk = undefined) {
    tsEnqueue(this.#t, chunk);
  }

  error(reason = undefined) {
    tsError(this.#t, reason);
  }

  terminate() {
    tsTerminate(this.#t);
  }
}
defineInterface(TransformStreamDefaultController, 'TransformStreamDefaultController');

// Workers' byte-only identity streams. A FixedLengthStream must carry exactly
// the announced number of bytes.
function identityByteChunk(chunk) {
  if (typeof chunk === 'string') {
    throw new TypeError('This TransformStream is being used as a byte stream, but received a string on its writable side. If you wish to write a string, you\'ll probably want to explicitly UTF-8-encode it with TextEncoder.');
  }
  const bytes = bufferSourceBytes(chunk);
  if (bytes === null) {
    throw new TypeError('This TransformStream is being used as a byte stream, but received an object of non-ArrayBuffer/ArrayBufferView type on its writable side.');
  }
  return bytes.slice();
}

class IdentityTransformStream extends TransformStream {
  constructor(strategy = undefined) {
    const o = toDictionary(strategy, 'The queuing strategy');
    const hwm = o === null || o.highWaterMark === undefined ? 0 : o.highWaterMark;
    super({
      transform(chunk, controller) {
        controller.enqueue(identityByteChunk(chunk));
      },
    }, undefined, { highWaterMark: hwm, size: byteLengthSize });
  }
}
defineInterface(IdentityTransformStream, 'IdentityTransformStream');

class FixedLengthStream extends TransformStream {
  constructor(expectedLength, strategy = undefined) {
    requireArgs(arguments.length, 1, 'constructor', 'FixedLengthStream');
    const expected = Number(expectedLength);
    if (!Number.isInteger(expected) || expected < 0 || expected > Number.MAX_SAFE_INTEGER) {
      throw new TypeError('FixedLengthStream requires an integer expected length less than 2^53.');
    }
    const o = toDictionary(strategy, 'The queuing strategy');
    const hwm = o === null || o.highWaterMark === undefined ? 0 : Math.min(expected, Number(o.highWaterMark));
    let seen = 0;
    super({
      transform(chunk, controller) {
        const bytes = identityByteChunk(chunk);
        seen += bytes.length;
        if (seen > expected) throw new TypeError('Attempt to write too many bytes through a FixedLengthStream.');
        controller.enqueue(bytes);
      },
      flush() {
        if (seen < expected) throw new TypeError('FixedLengthStream did not see all expected bytes before close().');
      },
    }, undefined, { highWaterMark: hwm, size: byteLengthSize });
    rsStateOf(this.readable).expectedLength = expected;
  }
}
defineInterface(FixedLengthStream, 'FixedLengthStream');

// Queuing strategies -------------------------------------------------------------

const byteLengthSize = { size(chunk) { return chunk.byteLength; } }.size;
const countSize = { size() { return 1; } }.size;

class ByteLengthQueuingStrategy {
  #hwm;

  constructor(init) {
    requireArgs(arguments.length, 1, 'constructor', 'ByteLengthQueuingStrategy');
    const o = toDictionary(init, 'The init argument');
    if (o === null || o.highWaterMark === undefined) {
      throw new TypeError("Failed to construct 'ByteLengthQueuingStrategy': required member highWaterMark is undefined.");
    }
    this.#hwm = Number(o.highWaterMark);
  }

  get highWaterMark() {
    return this.#hwm;
  }

  get size() {
    return byteLengthSize;
  }
}
defineInterface(ByteLengthQueuingStrategy, 'ByteLengthQueuingStrategy');

class CountQueuingStrategy {
  #hwm;

  constructor(init) {
    requireArgs(arguments.length, 1, 'constructor', 'CountQueuingStrategy');
    const o = toDictionary(init, 'The init argument');
    if (o === null || o.highWaterMark === undefined) {
      throw new TypeError("Failed to construct 'CountQueuingStrategy': required member highWaterMark is undefined.");
    }
    this.#hwm = Number(o.highWaterMark);
  }

  get highWaterMark() {
    return this.#hwm;
  }

  get size() {
    return countSize;
  }
}
defineInterface(CountQueuingStrategy, 'CountQueuingStrategy');

// Encoding streams -------------------------------------------------------------

class TextEncoderStream {
  #transform;

  constructor() {
    let pendingHigh = '';
    this.#transform = new TransformStream({
      transform(chunk, controller) {
        let s = pendingHigh + toDOMString(chunk);
        pendingHigh = '';
        const last = s.charCodeAt(s.length - 1);
        if (last >= 0xd800 && last <= 0xdbff) {
          // A surrogate pair may be split across chunks.
          pendingHigh = s.slice(-1);
          s = s.slice(0, -1);
        }
        if (s !== '') controller.enqueue(native.utf8Encode(s));
      },
      flush(controller) {
        if (pendingHigh !== '') controller.enqueue(new Uint8Array([0xef, 0xbf, 0xbd]));
      },
    });
  }

  get encoding() {
    return 'utf-8';
  }

  get readable() {
    return this.#transform.readable;
  }

  get writable() {
    return this.#transform.writable;
  }
}
defineInterface(TextEncoderStream, 'TextEncoderStream');

class TextDecoderStream {
  #decoder;
  #transform;

  constructor(label = 'utf-8', options = undefined) {
    const decoder = new TextDecoder(label, options);
    this.#decoder = decoder;
    this.#transform = new TransformStream({
      transform(chunk, controller) {
        if (bufferSourceBytes(chunk) === null) {
          throw new TypeError('TextDecoderStream: chunks must be ArrayBuffers or views.');
        }
        const s = decoder.decode(chunk, { stream: true });
        if (s !== '') controller.enqueue(s);
      },
      flush(controller) {
        const s = decoder.decode();
        if (s !== '') controller.enqueue(s);
      },
    });
  }

  get encoding() {
    return this.#decoder.encoding;
  }

  get fatal() {
    return this.#decoder.fatal;
  }

  get ignoreBOM() {
    return this.#decoder.ignoreBOM;
  }

  get readable() {
    return this.#transform.readable;
  }

  get writable() {
    return this.#transform.writable;
  }
}
defineInterface(TextDecoderStream, 'TextDecoderStream');

return {
  ReadableStream, ReadableStreamDefaultReader, ReadableStreamDefaultController,
  ReadableByteStreamController, WritableStream, WritableStreamDefaultWriter,
  WritableStreamDefaultController, TransformStream, TransformStreamDefaultController,
  IdentityTransformStream, FixedLengthStream, ByteLengthQueuingStrategy, CountQueuingStrategy,
  TextEncoderStream, TextDecoderStream, rsCancel, readerReadPromise, acquireReader, readerRelease,
  rsStateOf, isReadableStream, readableStreamTee, readableStreamDisturbed, readableStreamFromBytes,
  readableStreamUsed, chunkToBytes, readableStreamReadAll,
};
});
defineLazyGlobals(streamsFragment, [
  'ReadableStream', 'ReadableStreamDefaultReader', 'ReadableStreamDefaultController',
  'ReadableByteStreamController', 'WritableStream', 'WritableStreamDefaultWriter',
  'WritableStreamDefaultController', 'TransformStream', 'TransformStreamDefaultController',
  'IdentityTransformStream', 'FixedLengthStream', 'ByteLengthQueuingStrategy',
  'CountQueuingStrategy', 'TextEncoderStream', 'TextDecoderStream',
]);

// What the other files use; the stream-making ones make the fragment.
function isReadableStream(v) {
  return streamsMade && streamsFragment().isReadableStream(v);
}
function rsCancel(stream, reason) {
  return streamsFragment().rsCancel(stream, reason);
}
function readerReadPromise(reader) {
  return streamsFragment().readerReadPromise(reader);
}
function acquireReader(stream) {
  return streamsFragment().acquireReader(stream);
}
function readerRelease(reader) {
  return streamsFragment().readerRelease(reader);
}
function rsStateOf(stream) {
  return streamsFragment().rsStateOf(stream);
}
function readableStreamTee(stream) {
  return streamsFragment().readableStreamTee(stream);
}
function readableStreamDisturbed(stream) {
  return streamsFragment().readableStreamDisturbed(stream);
}
function readableStreamFromBytes(u8) {
  return streamsFragment().readableStreamFromBytes(u8);
}
function readableStreamUsed() {
  return streamsFragment().readableStreamUsed();
}
function chunkToBytes(chunk) {
  return streamsFragment().chunkToBytes(chunk);
}
function readableStreamReadAll(stream) {
  return streamsFragment().readableStreamReadAll(stream);
}

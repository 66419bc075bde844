// WHATWG Streams: TransformStream and its controller, and the Workers'
// IdentityTransformStream and FixedLengthStream.
//
// Takes from
//   00-util.js: toDictionary, kPrivate, defineInterface, bufferSourceBytes, requireArgs
//   20-streams-queue.js, as the argument `queue`: newDeferred, promiseCall, optionalMethod,
//     strategyFrom, byteLengthSize
//   21-streams-writable.js, as the argument `writable`: WritableStream,
//     WritableStreamDefaultController, WSControllerState, wsStateOf, setUpWSController,
//     wsControllerErrorIfNeeded
//   22-streams-readable.js, as the argument `readable`: ReadableStream,
//     ReadableStreamDefaultController, RSControllerState, rsStateOf, setUpRSController,
//     rsCanCloseOrEnqueue, rsDesiredSize, rsShouldCallPull, rsControllerClose, rsControllerEnqueue,
//     rsControllerError

function makeStreamsTransform(queue, readable, writable) {
const { newDeferred, promiseCall, optionalMethod, strategyFrom, byteLengthSize } = queue;
const { ReadableStream, ReadableStreamDefaultController, RSControllerState, rsStateOf,
  setUpRSController, rsCanCloseOrEnqueue, rsDesiredSize, rsShouldCallPull, rsControllerClose,
  rsControllerEnqueue, rsControllerError } = readable;
const { WritableStream, WritableStreamDefaultController, WSControllerState, wsStateOf,
  setUpWSController, wsControllerErrorIfNeeded } = writable;


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

return {
  TransformStream, TransformStreamDefaultController, IdentityTransformStream, FixedLengthStream,
};
}

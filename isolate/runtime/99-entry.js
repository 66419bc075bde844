// The entry points the shim calls: setHandler, dispatch and fireTimer.
//
// For every dispatched request exactly one of native.respond / native.fail is
// called, then native.done once every ctx.waitUntil() promise has settled.
//
// Takes from
//   00-util.js: kPrivate, requireArgs, defineInterface, describeValueType, isObjectLike,
//     activeRequest
//   11-report-error.js: reportError
//   12-timers.js: cancelTimers, fireTimer
//   25-streams.js: rsStateOf, readableStreamReadAll, streamsFragment (ReadableStream),
//     acquireReader, readerReadPromise, chunkToBytes, rsCancel, readerRelease
//   26-blob.js: blobBytesOf
//   38-headers.js: Headers
//   39-body.js: isStreamSource
//   40-request.js: newIncomingRequest
//   41-response.js: responseType, responseTakeBody, responseStatus, responseHeaderList, isResponse,
//     Response
//   45-hostcalls.js: hostCallSync, hostCallAsync, installBindings

class RequestState {
  constructor(token) {
    this.token = token;
    this.pending = 0;     // waitUntil() promises not yet settled
    this.settled = false; // respond or fail has been called
    this.done = false;    // done has been called
    this.streaming = false; // the body is still going out (pumpResponseBody)
    this.timers = null;   // Set of ids of timers still pending
  }

  addTimer(id) {
    if (this.timers === null) this.timers = new Set();
    this.timers.add(id);
  }

  removeTimer(id) {
    if (this.timers !== null) this.timers.delete(id);
  }
}

class ExecutionContext {
  #state;
  #props = null;

  constructor(key, state) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#state = state;
  }

  waitUntil(promise) {
    requireArgs(arguments.length, 1, 'waitUntil', 'ExecutionContext');
    const state = this.#state;
    if (state.done) return; // the request is over: nothing waits any more
    state.pending++;
    trackWaitUntil(state, promise);
  }

  passThroughOnException() {}

  get props() {
    if (this.#props === null) this.#props = {};
    return this.#props;
  }
}
defineInterface(ExecutionContext, 'ExecutionContext');

let handler = null;
let handlerEnv = {};

async function trackWaitUntil(state, promise) {
  try {
    await promise;
  } catch (err) {
    reportError(err);
  }
  state.pending--;
  if (state.pending === 0 && state.settled && !state.streaming) finishRequest(state);
}

function finishRequest(state) {
  if (state.done) return;
  state.done = true;
  const ids = state.timers;
  state.timers = null;
  if (ids !== null) cancelTimers(ids);
  try {
    native.done(state.token);
  } catch {
    // Nothing is left to tell the host about this request.
  }
}

function failRequest(state, kind, error) {
  if (state.settled) return;
  state.settled = true;
  try {
    native.fail(state.token, kind, error);
  } catch {
    // The host could not take it either; the request still ends below.
  }
  if (state.pending === 0) finishRequest(state);
}

function respondRequest(state, status, headerList, body) {
  if (state.settled) return;
  state.settled = true;
  try {
    native.respond(state.token, status, headerList, body);
  } catch (err) {
    state.settled = false;
    failRequest(state, 'exception', err);
    return;
  }
  if (state.pending === 0) finishRequest(state);
}

function sendResponse(state, response) {
  let body;
  try {
    if (responseType(response) === 'error') {
      throw new TypeError('Return value from serve handler must not be an error response (like Response.error())');
    }
    body = responseTakeBody(response);
  } catch (err) {
    failRequest(state, 'exception', err);
    return;
  }
  if (isStreamSource(body)) {
    sendStreamedResponse(state, response, body);
    return;
  }
  const bytes = body === null || typeof body === 'string' || body instanceof Uint8Array
    ? body : blobBytesOf(body);
  respondRequest(state, responseStatus(response), responseHeaderList(response), bytes);
}

// A body stream still being produced goes to the client chunk by chunk
// (native.respondStart, respondWrite, respondEnd, respondAbort: the host's
// iso_host_stream); hosts that stream no responses (dynamic workers, one-shot
// runs) and streams that are complete already get the body in one piece.

function streamIsComplete(object) {
  const stream = rsStateOf(object);
  if (stream.state === 'closed') return true;
  return stream.reader === null && stream.state === 'readable' && stream.controller.closeRequested;
}

async function sendStreamedResponse(state, response, stream) {
  const status = responseStatus(response);
  const headerList = responseHeaderList(response);
  if (!streamIsComplete(stream)) {
    let started = false;
    try {
      const length = rsStateOf(stream).expectedLength;
      started = native.respondStart(state.token, status, headerList, length) === true;
    } catch {
      // No streaming here: buffered below.
    }
    if (started) {
      state.settled = true;
      state.streaming = true;
      await pumpResponseBody(state, stream);
      return;
    }
  }
  let bytes;
  try {
    bytes = await readableStreamReadAll(stream);
  } catch (err) {
    failRequest(state, 'exception', err);
    return;
  }
  respondRequest(state, status, headerList, bytes);
}

// A request body the host passes on as it arrives (worker/stream.c). The
// token names the request it belongs to, whoever reads it.
const kRequestBinding = ' request';

function incomingBodyStream(token) {
  const { ReadableStream } = streamsFragment();
  return new ReadableStream({
    async pull(c) {
      for (;;) {
        const piece = hostCallSync(kRequestBinding, 'read', [token]);
        if (piece === false) {
          await hostCallAsync(kRequestBinding, 'wait', [token]);
          continue;
        }
        if (piece === null) c.close();
        else c.enqueue(new Uint8Array(piece));
        return;
      }
    },
  });
}

async function pumpResponseBody(state, object) {
  const stream = rsStateOf(object);
  const reader = acquireReader(stream);
  try {
    for (;;) {
      const result = await readerReadPromise(reader);
      if (result.done) break;
      const bytes = chunkToBytes(result.value);
      // A promise when the client is behind: it settles once it caught up.
      const behind = native.respondWrite(state.token, bytes);
      if (behind !== undefined) await behind;
    }
    native.respondEnd(state.token);
  } catch (err) {
    rsCancel(stream, err).then(undefined, () => {});
    try {
      native.respondAbort(state.token, `${err && err.message !== undefined ? err.message : err}`);
    } catch {
      // The host has let go of the request already.
    }
  } finally {
    if (reader.stream !== null) readerRelease(reader);
    state.streaming = false;
    if (state.pending === 0) finishRequest(state);
  }
}

// What fetch() returned instead of a Response. Something that calls itself
// one and is not (a Proxy around a Response, an object with its prototype)
// is named as that, not as "Response, not a Response".
function describeReturned(value) {
  const type = describeValueType(value);
  return type === 'Response' ? 'a Proxy or look-alike of a Response' : type;
}

async function awaitResponse(state, result) {
  let response;
  try {
    response = await result;
  } catch (err) {
    failRequest(state, 'exception', err);
    return;
  }
  if (typeof response === 'object' && response !== null && isResponse(response)) {
    sendResponse(state, response);
  } else {
    failRequest(state, 'bad_return', describeReturned(response));
  }
}

function setHandler(defaultExport, env, bindings) {
  if (!isObjectLike(defaultExport) || typeof defaultExport.fetch !== 'function') {
    throw new TypeError('The worker has no default export with a fetch() method');
  }
  handler = defaultExport;
  handlerEnv = env === undefined ? {} : env;
  installBindings(handlerEnv, bindings);
  activeRequest = null;
}

function dispatch(token, method, url, headers, body) {
  const state = new RequestState(token);
  activeRequest = state;
  if (handler === null) {
    failRequest(state, 'exception', new TypeError('The worker has no default export with a fetch() method'));
    return;
  }
  if (body === undefined || method === 'GET' || method === 'HEAD') body = null;
  else if (body === true) body = incomingBodyStream(token);
  const request = newIncomingRequest(method, url, headers, body);
  const ctx = new ExecutionContext(kPrivate, state);
  let result;
  try {
    // As a method call: a fetch() using `this` sees the default export.
    result = handler.fetch(request, handlerEnv, ctx);
  } catch (err) {
    failRequest(state, 'exception', err);
    return;
  }
  if (typeof result === 'object' && result !== null && isResponse(result)) {
    sendResponse(state, result);
  } else {
    awaitResponse(state, result);
  }
}

// Run once, in the context the snapshot keeps, so that a worker's first
// request finds its path ready instead of building it (a third of the
// instructions of a fresh worker's first request):
// - one instance of each class a request makes, kept alive with the
//   snapshot: a context gets the hidden classes (maps) of a class's
//   instances when it makes the first one;
// - one request through dispatch, with a handler of the runtime's own: the
//   functions every request calls get their closures initialized and their
//   feedback (inline caches) filled.
// The module state a request touches is put back as it was.
function warmRequestPath() {
  const state = new RequestState(0);
  const request = newIncomingRequest('GET', 'http://warm.localhost/', ['accept', '*/*'], null);
  const kept = [state, request, request.headers, new ExecutionContext(kPrivate, state),
                new Response('warm'), Response.json({}), new Headers({ 'content-type': 'text/plain' })];
  handler = { fetch() { return new Response('warm'); } };
  try {
    dispatch(0, 'GET', 'http://warm.localhost/', ['accept', '*/*'], null);
  } finally {
    handler = null;
    handlerEnv = {};
    activeRequest = null;
  }
  return kept;
}

return { setHandler, dispatch, fireTimer, warmRequestPath, installWasm };

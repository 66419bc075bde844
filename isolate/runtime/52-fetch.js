// fetch(): outbound requests. The isolate has no network of its own: every
// fetch goes to the host (binding '', see worker/egress_link.c) and from
// there to the egress process, which checks it against the worker's
// allow-list, adds the credentials the operator configured (the isolate
// never sees them) and streams the response back.
//
// Host calls: 'fetch' [handle, method, url, headers, body, redirect] answers
// the response head [status, statusText, headers, url, redirected, done,
// body]; 'read' [handle] answers [bytes, last] with more of the body;
// 'cancel' [handle] abandons the fetch. `handle` is a number this isolate
// picks to name the fetch.
//
// Takes from
//   00-util.js: isObjectLike, defineGlobal
//   20-streams-queue.js: markHandled
//   25-streams.js: streamsFragment (ReadableStream)
//   38-headers.js: Headers, headersListOf
//   40-request.js: Request, isRequest
//   41-response.js: isNullBodyStatus, responseFreezeHeaders, Response
//   45-hostcalls.js: hostCallAsync

let fetchHandleSeq = 0;

const fetchStatusTextBadRe = /[\0-\x1f\x7f]/g;

// A flat [name, value, ...] list as the [[name, value], ...] a Headers init takes.
function flatToPairs(flat) {
  const pairs = [];
  for (let i = 0; i + 1 < flat.length; i += 2) pairs.push([flat[i], flat[i + 1]]);
  return pairs;
}

// The response body: bytes that came with the head, then host reads, pulled
// only when the reader asks (highWaterMark 0), so the egress never sends
// more than the isolate consumes.
function fetchBodyStream(handle, first, done, state) {
  const { ReadableStream } = streamsFragment();
  return new ReadableStream({
    start(controller) {
      state.controller = controller;
      if (first.byteLength > 0) controller.enqueue(new Uint8Array(first));
      if (done) {
        state.done = true;
        controller.close();
        state.release();
      }
    },
    async pull(controller) {
      const [bytes, last] = await hostCallAsync('', 'read', [handle]);
      if (state.done) return; // aborted meanwhile
      if (bytes.byteLength > 0) controller.enqueue(new Uint8Array(bytes));
      if (last) {
        state.done = true;
        controller.close();
        state.release();
      }
    },
    cancel() {
      if (state.done) return;
      state.done = true;
      state.release();
      hostCallAsync('', 'cancel', [handle]).catch(() => {});
    },
  }, { highWaterMark: 0 });
}

function fetchResponse(request, handle, result, state) {
  const head = {
    status: result[0], statusText: result[1], headers: result[2], url: result[3],
    redirected: result[4], done: result[5], body: result[6],
  };
  const status = head.status;
  if (!(status >= 200 && status <= 599)) {
    if (!head.done) hostCallAsync('', 'cancel', [handle]).catch(() => {});
    throw new TypeError(`fetch failed: ${request.url} answered with status ${status}, which a Response cannot hold`);
  }
  // Checked before the body stream exists: a header Headers refuses must
  // still let go of the upstream (and of the request's fetch slot).
  let headers;
  try {
    headers = new Headers(flatToPairs(head.headers));
  } catch (err) {
    if (!head.done) hostCallAsync('', 'cancel', [handle]).catch(() => {});
    throw new TypeError(`fetch failed: ${request.url} answered with a malformed header (${err.message})`);
  }
  const nullBody = request.method === 'HEAD' || isNullBodyStatus(status);
  if (nullBody && !head.done) hostCallAsync('', 'cancel', [handle]).catch(() => {});
  state.done = nullBody || head.done;
  // A body that came whole with the head needs no stream until one is asked for.
  let body = null;
  if (!nullBody) body = head.done ? new Uint8Array(head.body) : fetchBodyStream(handle, head.body, false, state);
  // Its headers are immutable, as the Fetch standard and Workers make a
  // fetched response's: new Response(res.body, res) makes a mutable copy.
  const response = responseFreezeHeaders(new Response(body, {
    status,
    statusText: head.statusText.replace(fetchStatusTextBadRe, ' '),
    headers,
  }));
  // A fetched response knows where it came from.
  Object.defineProperty(response, 'url', { value: head.url, enumerable: false, configurable: true });
  if (head.redirected) {
    Object.defineProperty(response, 'redirected', { value: true, enumerable: false, configurable: true });
  }
  return response;
}

async function fetch(input, init = undefined) {
  // "error" is a redirect mode of fetch() that Request does not keep.
  let redirect;
  if (isObjectLike(init) && init.redirect !== undefined && `${init.redirect}` === 'error') {
    redirect = 'error';
    init = { ...init };
    delete init.redirect;
  }
  const request = new Request(input, init);
  if (redirect === undefined) redirect = request.redirect;
  const url = request.url;
  if (!/^https?:/i.test(url)) throw new TypeError(`Fetch API cannot load: ${url}`);
  // Only a signal the caller passed can abort; the one a Request makes up cannot.
  const signal = (isObjectLike(init) && init.signal !== undefined && init.signal !== null) ||
    (isObjectLike(input) && isRequest(input)) ? request.signal : null;
  if (signal !== null) signal.throwIfAborted();
  const method = request.method;
  const headers = headersListOf(request.headers).slice();
  let body = null;
  if (request.body !== null) body = await request.arrayBuffer();

  const handle = ++fetchHandleSeq;
  const state = { done: false, controller: null, release: () => {} };
  if (signal !== null) signal.throwIfAborted(); // it may have fired while the body was read
  const call = hostCallAsync('', 'fetch', [handle, method, url, headers, body, redirect]);
  if (signal === null) return fetchResponse(request, handle, await call, state);
  let rejectAbort;
  const aborted = new Promise((_, reject) => {
    rejectAbort = reject;
  });
  markHandled(aborted);
  const onAbort = () => {
    const reason = signal.reason;
    rejectAbort(reason);
    if (state.done) return;
    state.done = true;
    if (state.controller !== null) {
      try {
        state.controller.error(reason);
      } catch {
        // the stream is already closed or errored
      }
    }
    hostCallAsync('', 'cancel', [handle]).catch(() => {});
  };
  signal.addEventListener('abort', onAbort, { once: true });
  state.release = () => signal.removeEventListener('abort', onAbort);
  let response;
  try {
    response = fetchResponse(request, handle, await Promise.race([call, aborted]), state);
  } catch (err) {
    // Aborted, failed, or refused as it came (a malformed head): the
    // signal has nothing left to stop.
    state.release();
    throw err;
  }
  if (state.done) state.release();
  return response;
}

defineGlobal('fetch', fetch);

// The loader binding: dynamic workers, each in an isolate of its own, with the
// JavaScript API of workerd's worker loader so that a parent script runs on
// both:
//
//   env.LOADER.load(code)          -> a WorkerStub over a fresh isolate
//   env.LOADER.get(id, getCode)    -> a WorkerStub over a cached isolate for id;
//                                     getCode() runs whenever it must be (re)started
//   stub.getEntrypoint().fetch(request) -> the dynamic worker's response
//
// code = {compatibilityDate, mainModule, modules: {name: source | {js} |
// {text} | {json} | {data}}, env, globalOutbound, limits: {cpuMs, memoryMB,
// subRequests}}.
//
// The host (worker/loader_link.c) keeps the isolates. Every request is one
// async host call, op "fetch", with arguments
//   [kind (0 load, 1 get), key (a stub number or the id), code or undefined,
//    method, url, flat headers, body bytes or null]
// answered with [status, flat headers, body ArrayBuffer]. When the host does
// not hold the isolate and no code came with the call, it fails the call with
// an error named "LoaderNeedsCode": the stub sends the code (calling getCode()
// for get()) and asks again.
//
// Takes from
//   00-util.js: lazyFragment, kPrivate, isObjectLike, bufferSourceBytes, requireArgs,
//     defineInterface
//   16-base64.js: btoa
//   38-headers.js: headersListOf, headersFromList, GUARD_NONE
//   40-request.js: parseRequestURL, Request, isRequest
//   41-response.js: Response, isNullBodyStatus
//   45-hostcalls.js: bindingFactories

// A load() child lives as long as its stub can still be called. The host
// frees it when the parent's request is over, or sooner, once the stub is
// garbage: a parent that loads children one after another in a long request
// then holds a few at a time, not every one it made. Taken at load: the
// fragment's top level runs after tenant code may have replaced globals.
const LoaderStubRegistry = FinalizationRegistry;
const loaderRegisterStub = FinalizationRegistry.prototype.register;
const loaderApply = Reflect.apply;

// Evaluated when a worker first gets this binding (lazyFragment,
// 00-util.js); the body is not indented.
const loaderFragment = lazyFragment(() => {
const loaderMaxCodeBytes = 64 * 1024 * 1024;
const loaderMaxEnvBytes = 1024 * 1024;
const loaderNeedsCode = 'LoaderNeedsCode';
const loaderModuleKinds = ['js', 'cjs', 'text', 'data', 'json', 'py', 'wasm'];
const loaderErrorClasses = {
  Error, TypeError, RangeError, SyntaxError, ReferenceError, EvalError, URIError,
};
let loaderStubSerial = 0;
// What is held for a collected stub: [binding, kind, key].
const loaderStubsGone = new LoaderStubRegistry((held) => {
  try {
    native.callSync(held[0], 'release', [held[1], held[2]]);
  } catch {
    // The parent is going away: its children go with it.
  }
});
// A stub whose isolate is the stub's own (load(), or get() without an id).
function loaderOwnStub(binding, code, getCode) {
  const key = ++loaderStubSerial;
  const state = new LoaderStubState(binding, 0, key, code, getCode);
  loaderApply(loaderRegisterStub, loaderStubsGone, [state, [binding, 0, key]]);
  return new WorkerStub(kPrivate, state);
}

// UTF-8 bytes of a string; past `limit` its length (a lower bound) does.
function loaderUtf8Length(s, limit) {
  if (s.length > limit) return s.length;
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length &&
             (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 2;  // a pair: 2 code units, 4 bytes
      i++;
    } else n += 2;
  }
  return n;
}

const loaderWasmName = (name) => name.endsWith('.wasm');

function loaderBase64(bytes) {
  let s = '';
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

// One module: its size as the limit counts it (the content as given, before
// any wrapping: a string, or a byte count) and a function making the ES
// module source the child compiles. The size is checked before the source
// is made: wrapping a {text} module escapes it, and for code near the limit
// that copy alone could take the parent past its memory limit before the
// clear "exceeds the maximum allowed size" error was ever reached.
function loaderModule(name, value) {
  if (typeof value === 'string') {
    // .ts and .mts: TypeScript, its types stripped by the host (isolate/typescript.cc).
    if (/\.(m?js|m?ts)$/.test(name)) return [value, () => value];
    throw new TypeError(`Module name must end with '.js' or '.ts' (or the content must be an object ` +
                        `indicating the type explicitly). Got: ${name}`);
  }
  if (!isObjectLike(value)) {
    throw new TypeError(`Module '${name}' must be a string or an object such as {js: '...'}.`);
  }
  let kind = null;
  let count = 0;
  for (const k of loaderModuleKinds) {
    if (value[k] !== undefined) {
      kind = k;
      count++;
    }
  }
  if (count !== 1) {
    throw new TypeError("Each module must contain exactly one of 'js', 'cjs', 'text', 'data', " +
                        `'json', 'py', or 'wasm'. Module '${name}' contained ${count} properties.`);
  }
  const content = value[kind];
  if (kind !== 'wasm' && loaderWasmName(name)) {
    throw new TypeError(`Module '${name}': a module named '.wasm' must be a {wasm} module.`);
  }
  switch (kind) {
    case 'js': {
      const js = `${content}`;
      return [js, () => js];
    }
    case 'text': {
      const text = `${content}`;
      return [text, () => `export default ${JSON.stringify(text)};\n`];
    }
    case 'json': {
      const json = JSON.stringify(content);
      if (json === undefined) throw new TypeError(`Module '${name}': the json value is not serializable.`);
      // Parsed, not written as a literal: a "__proto__" key stays a key.
      return [json, () => `export default JSON.parse(${JSON.stringify(json)});\n`];
    }
    case 'data':
    case 'wasm': {
      const bytes = bufferSourceBytes(content);
      if (bytes === null) throw new TypeError(`Module '${name}': ${kind} must be an ArrayBuffer or a view.`);
      // A wasm module's default export is the compiled WebAssembly.Module.
      // Named .wasm, the child compiles it from its base64 natively
      // (modules.cc); under another name it is decoded in JavaScript.
      if (kind === 'wasm' && loaderWasmName(name)) return [bytes.length, () => loaderBase64(bytes)];
      const value = kind === 'wasm' ? 'new WebAssembly.Module(u)' : 'u.buffer';
      return [bytes.length, () =>
        `const b = atob(${JSON.stringify(loaderBase64(bytes))}); const u = new Uint8Array(b.length);\n` +
        'for (let i = 0; i < b.length; i++) u[i] = b.charCodeAt(i);\n' +
        `export default ${value};\n`];
    }
    default:
      throw new TypeError(`Module '${name}': ${kind} modules are not supported by this runtime's loader.`);
  }
}

function loaderLimit(limits, key) {
  const v = limits[key];
  if (v === undefined || v === null) return 0;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new TypeError(`limits.${key} must be a positive number.`);
  return Math.max(1, Math.min(Math.floor(n), 2 ** 31));
}

// The code as the host takes it:
// [mainModule, [name, source, ...], envJson | null, outbound, cpuMs, memoryMB, subRequests]
// (0 for a limit that was not given; -1 subrequests for no limit).
function loaderCode(code) {
  if (!isObjectLike(code)) throw new TypeError('The worker code must be an object.');
  if (typeof code.compatibilityDate !== 'string') {
    throw new TypeError('The worker code needs a compatibilityDate string.');
  }
  if (typeof code.mainModule !== 'string') throw new TypeError('The worker code needs a mainModule string.');
  const modules = code.modules;
  if (!isObjectLike(modules)) throw new TypeError('The worker code needs a modules object.');
  const names = Object.keys(modules);
  if (names.length === 0) throw new TypeError('Dynamic Worker code must contain at least one module.');
  const flat = [];
  let size = 0;
  const sources = [];
  for (const name of names) {
    const [counted, source] = loaderModule(name, modules[name]);
    size += typeof counted === 'number' ? counted
                                        : loaderUtf8Length(counted, loaderMaxCodeBytes - size + 1);
    if (size > loaderMaxCodeBytes) {
      throw new Error(`Dynamic Worker code size (over ${size} bytes) exceeds the maximum allowed ` +
                      `size of ${loaderMaxCodeBytes} bytes.`);
    }
    sources.push(name, source);
  }
  for (let i = 0; i < sources.length; i += 2) flat.push(sources[i], sources[i + 1]());
  if (!Object.prototype.hasOwnProperty.call(modules, code.mainModule)) {
    throw new TypeError(`mainModule '${code.mainModule}' is not one of the modules.`);
  }
  let env = null;
  if (code.env !== undefined && code.env !== null) {
    if (typeof code.env !== 'object') throw new TypeError('env must be an object.');
    try {
      env = JSON.stringify(code.env, loaderEnvValue);
    } catch (err) {
      if (err instanceof TypeError && err.message.startsWith('env')) throw err;
      throw new TypeError(`env must hold plain (JSON) values: ${err.message}`);
    }
    const bytes = loaderUtf8Length(env, loaderMaxEnvBytes);
    if (bytes > loaderMaxEnvBytes) {
      throw new Error(`Dynamic Worker env size (${bytes} bytes) exceeds the maximum allowed size ` +
                      `of ${loaderMaxEnvBytes} bytes.`);
    }
  }
  // true: the parent's egress policy; false: no network; a string: the
  // egress policy of that name, if the parent's loader binding grants it
  // (the host checks that, worker/loader_link.c).
  let outbound = true;
  if (code.globalOutbound === null) {
    outbound = false;
  } else if (typeof code.globalOutbound === 'string') {
    outbound = code.globalOutbound;
  } else if (code.globalOutbound !== undefined) {
    throw new TypeError('globalOutbound: only null (no network), the name of an egress policy ' +
                        "granted to this worker, or leaving it out (inherit the parent's) is " +
                        'supported.');
  }
  let cpuMs = 0;
  let memoryMB = 0;
  let subRequests = -1;
  if (code.limits !== undefined && code.limits !== null) {
    if (typeof code.limits !== 'object') throw new TypeError('limits must be an object.');
    cpuMs = loaderLimit(code.limits, 'cpuMs');
    memoryMB = loaderLimit(code.limits, 'memoryMB');
    // A context needs about a megabyte before any code runs: below a
    // deployed worker's floor the child could only fail, and unclearly.
    if (memoryMB !== 0 && memoryMB < 8) {
      throw new RangeError(`limits.memoryMB must be at least 8 (got ${memoryMB}).`);
    }
    if (code.limits.subRequests !== undefined && code.limits.subRequests !== null) {
      const n = Number(code.limits.subRequests);
      if (!Number.isFinite(n) || n < 0) throw new TypeError('limits.subRequests must be a number >= 0.');
      subRequests = Math.min(Math.floor(n), 2 ** 31);
    }
  }
  return [code.mainModule, flat, env, outbound, cpuMs, memoryMB, subRequests];
}

// JSON.stringify's replacer for env: what JSON would change or drop without a
// word (a function or a symbol vanishes, a Map becomes {}, a Date a string,
// a binding such as env.LOADER an empty object, NaN null) is refused, so
// that the child never sees a value other than the one the parent gave.
// workerd clones env and refuses what it cannot clone; this runtime takes
// plain JSON values only. `this[key]` is the value before any toJSON().
function loaderEnvValue(key, value) {
  const original = this[key];
  const where = key === '' ? 'env' : `env value '${key}'`;
  const type = typeof original;
  if (type === 'function' || type === 'symbol') {
    throw new TypeError(`${where}: a ${type} cannot be given to a dynamic worker ` +
                        '(env holds plain JSON values).');
  }
  if (type === 'number' && !Number.isFinite(original)) {
    throw new TypeError(`${where}: ${original} is not a JSON number (env holds plain JSON values).`);
  }
  if (type === 'object' && original !== null && !Array.isArray(original)) {
    const proto = Object.getPrototypeOf(original);
    if (proto !== Object.prototype && proto !== null) {
      const tag = Object.prototype.toString.call(original).slice(8, -1);
      throw new TypeError(`${where}: a ${tag === 'Object' ? 'class instance' : tag} cannot be ` +
                          'given to a dynamic worker (env holds plain JSON values: null, ' +
                          'booleans, numbers, strings, arrays and plain objects).');
    }
  }
  return value;
}

// The error a failed call reports, as the class it names, with the stack of
// the child's throw when the host gave one.
function loaderError(value) {
  if (!isObjectLike(value)) return new Error(typeof value === 'string' ? value : 'The dynamic worker failed');
  const name = typeof value.name === 'string' ? value.name : 'Error';
  const message = value.message === undefined ? '' : `${value.message}`;
  const Class = Object.prototype.hasOwnProperty.call(loaderErrorClasses, name) ? loaderErrorClasses[name] : Error;
  const err = new Class(message);
  if (err.name !== name) {
    Object.defineProperty(err, 'name', { value: name, writable: true, configurable: true });
  }
  if (typeof value.stack === 'string') {
    // The child's frames (where in its code it threw), then the parent's
    // that awaited it; the runtime's own say nothing to either author.
    const parent = `${err.stack}`.split('\n').slice(1)
      .filter((line) => !line.includes('(edgenode:') && !line.includes('at edgenode:'));
    Object.defineProperty(err, 'stack', {
      value: [value.stack, ...parent].join('\n'), writable: true, configurable: true,
    });
  }
  return err;
}

// What a stub knows: its binding, how the host names its isolate, and how to
// get its code.
class LoaderStubState {
  constructor(binding, kind, key, code, getCode) {
    this.binding = binding;
    this.kind = kind;
    this.key = key;
    this.code = code;       // load(): the normalised code
    this.getCode = getCode; // get(): the callback
    this.started = false;   // the host answered once: send no code until it asks
  }
}

// get() code being fetched, by binding and id: calls that all find the same
// id not started (several get() stubs for it, in one request or several)
// run its getCode() once between them and start it once, as in workerd.
const loaderCodePending = new Map();

function loaderCodeOnce(state) {
  const fetchCode = async () => loaderCode(await state.getCode());
  if (state.kind !== 1) return fetchCode();
  const k = `${state.binding}\0${state.key}`;
  let pending = loaderCodePending.get(k);
  if (pending === undefined) {
    pending = fetchCode();
    loaderCodePending.set(k, pending);
    const forget = () => {
      if (loaderCodePending.get(k) === pending) loaderCodePending.delete(k);
    };
    pending.then(forget, forget);
  }
  return pending;
}

async function loaderFetch(state, input, init) {
  let method = 'GET';
  let url;
  let headers = [];
  let body = null;
  let signal = null;
  if (typeof input === 'string' && init === undefined) {
    // fetch(url), the common call: what a Request made of it would carry,
    // without making one (a cold start is short enough for that to show).
    url = parseRequestURL(input);
  } else {
    const request = input instanceof Request && init === undefined ? input : new Request(input, init);
    method = request.method;
    url = request.url;
    headers = headersListOf(request.headers).slice();
    // Only a signal the caller passed can abort (as for the global fetch()):
    // a parent's AbortSignal.timeout() must end its wait for a child.
    if ((isObjectLike(init) && init.signal !== undefined && init.signal !== null) ||
        (isObjectLike(input) && isRequest(input))) {
      signal = request.signal;
      signal.throwIfAborted();
    }
    if (request.body !== null) body = new Uint8Array(await request.arrayBuffer());
  }
  if (signal === null) return loaderExchange(state, method, url, headers, body);
  signal.throwIfAborted();
  // The child is not stopped: it finishes (or meets its limits) on its own,
  // and its answer is dropped; the parent stops waiting for it now.
  return new Promise((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    loaderExchange(state, method, url, headers, body).then((res) => {
      signal.removeEventListener('abort', onAbort);
      resolve(res);
    }, (err) => {
      signal.removeEventListener('abort', onAbort);
      reject(err);
    });
  });
}

// The host call(s) of one request: the code goes along when the host asks.
async function loaderExchange(state, method, url, headers, body) {
  let code = state.code !== null && !state.started ? state.code : undefined;
  for (let attempt = 0; ; attempt++) {
    const outcome = await native.callAsync(state.binding, 'fetch',
      [state.kind, state.key, code, method, url, headers, body]);
    if (outcome[0]) {
      state.started = true;
      const [status, list, bytes] = outcome[1];
      const init = { status, headers: headersFromList(list, GUARD_NONE) };
      return new Response(isNullBodyStatus(status) ? null : bytes, init);
    }
    const err = outcome[1];
    if (attempt < 2 && isObjectLike(err) && err.name === loaderNeedsCode) {
      code = state.code !== null ? state.code : await loaderCodeOnce(state);
      continue;
    }
    throw loaderError(err);
  }
}

// An entrypoint of a dynamic worker: a Fetcher.
class LoaderFetcher {
  #state;
  #name;

  constructor(key, state, name) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#state = state;
    this.#name = name;
  }

  fetch(input, init = undefined) {
    requireArgs(arguments.length, 1, 'fetch', 'Fetcher');
    if (this.#name !== null) {
      return Promise.reject(new TypeError(
        `Entrypoint '${this.#name}': only the default entrypoint of a dynamic worker can be called here.`));
    }
    try {
      return loaderFetch(this.#state, input, init);
    } catch (err) {
      return Promise.reject(err);
    }
  }

  connect() {
    throw new TypeError('connect() is not supported on a dynamic worker.');
  }
}
defineInterface(LoaderFetcher, 'Fetcher');

class WorkerStub {
  #state;

  constructor(key, state) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#state = state;
  }

  getEntrypoint(name = undefined, options = undefined) {
    const named = name === undefined || name === null || `${name}` === 'default' ? null : `${name}`;
    return new LoaderFetcher(kPrivate, this.#state, named);
  }

  getDurableObjectClass() {
    throw new TypeError('Durable Object classes of dynamic workers are not supported.');
  }
}
defineInterface(WorkerStub, 'WorkerStub');

class WorkerLoader {
  #binding;

  constructor(key, binding) {
    if (key !== kPrivate) throw new TypeError('Illegal constructor');
    this.#binding = binding;
  }

  get(id, getCode) {
    requireArgs(arguments.length, 2, 'get', 'WorkerLoader');
    if (typeof getCode !== 'function') {
      throw new TypeError("Failed to execute 'get' on 'WorkerLoader': parameter 2 is not a function.");
    }
    if (id === null || id === undefined) {
      // No id: nothing to share, so each stub is its own isolate.
      return loaderOwnStub(this.#binding, null, getCode);
    }
    return new WorkerStub(kPrivate, new LoaderStubState(this.#binding, 1, `${id}`, null, getCode));
  }

  load(code) {
    requireArgs(arguments.length, 1, 'load', 'WorkerLoader');
    return loaderOwnStub(this.#binding, loaderCode(code), null);
  }
}
defineInterface(WorkerLoader, 'WorkerLoader');

return { WorkerLoader };
});

bindingFactories.loader = (name) => new (loaderFragment().WorkerLoader)(kPrivate, name);

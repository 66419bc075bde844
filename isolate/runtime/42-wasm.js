// WebAssembly's asynchronous forms, made from its synchronous ones.
//
// V8's own WebAssembly.compile and instantiate finish on a task V8 posts to
// the isolate's thread, which a worker runs only at the end of one of its
// entries: a request that awaited one with nothing else to do hung to the
// wall-time limit. Compiling on the isolate's thread instead costs what
// the background compile would have (Liftoff, then tier-up in the
// background as before) and keeps the CPU it takes on the request that
// asked. The streaming forms exist in a bare V8 only when the embedder
// streams the bytes itself; here they read the Response whole first.
//
// Takes from
//   00-util.js: isObjectLike, describeValueType
//   38-headers.js: Headers
//   41-response.js: isResponse, Response

function installWasm() {
  const WA = globalThis.WebAssembly;
  if (!isObjectLike(WA)) return;
  const Module = WA.Module;
  const Instance = WA.Instance;
  const responseArrayBuffer = Response.prototype.arrayBuffer;
  const headersGet = Headers.prototype.get;
  const responseHeaders = Object.getOwnPropertyDescriptor(Response.prototype, 'headers').get;
  const responseOk = Object.getOwnPropertyDescriptor(Response.prototype, 'ok').get;
  const apply = Reflect.apply;

  const instantiateModule = (module, imports) => new Instance(module, imports);
  // A Response, or a promise of one, as a compiled module.
  async function compileResponse(source, method) {
    const response = await source;
    if (!isResponse(response)) {
      throw new TypeError(`WebAssembly.${method}(): Argument 0 must be a Response or a promise ` +
                          `of one, got ${describeValueType(response)}.`);
    }
    const type = apply(headersGet, apply(responseHeaders, response, []), ['content-type']);
    if (type === null || type.split(';')[0].trim().toLowerCase() !== 'application/wasm') {
      throw new TypeError(`WebAssembly.${method}(): the Response's Content-Type must be ` +
                          `application/wasm, got ${type === null ? 'none' : JSON.stringify(type)}.`);
    }
    if (!apply(responseOk, response, [])) {
      throw new TypeError(`WebAssembly.${method}(): the Response's status is not ok.`);
    }
    return new Module(await apply(responseArrayBuffer, response, []));
  }

  const methods = {
    compile(bytes) {
      return new Promise((resolve) => resolve(new Module(bytes)));
    },
    instantiate(source, imports = undefined) {
      return new Promise((resolve) => {
        if (source instanceof Module) {
          resolve(instantiateModule(source, imports));
          return;
        }
        const module = new Module(source);
        resolve({ module, instance: instantiateModule(module, imports) });
      });
    },
    compileStreaming(source) {
      return compileResponse(source, 'compileStreaming');
    },
    async instantiateStreaming(source, imports = undefined) {
      const module = await compileResponse(source, 'instantiateStreaming');
      return { module, instance: instantiateModule(module, imports) };
    },
  };
  for (const name of Object.keys(methods)) {
    Object.defineProperty(WA, name, {
      value: methods[name], writable: true, enumerable: false, configurable: true,
    });
  }
}

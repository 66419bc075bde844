// Python workers: a .py main module runs on Pyodide (docs/python.md).
//
// isolate/modules.cc turns a .py module into a JavaScript module calling
// the function below with the Python source; its handler boots an
// interpreter on first use and calls the module's on_fetch(request, env) or
// run(input). Pyodide's files come from the process (python.cc): its two
// classic scripts run through importScripts, its data files and its wasm
// module through a fetch and an instantiateStreaming that serve only them,
// and only while the interpreter boots. Nothing is downloaded.
//
// Takes from
//   00-util.js: defineGlobal
//   34-url.js: URL
//   41-response.js: Response

const kPythonBase = 'https://pyodide.edgenode.invalid/';
const kPythonNoPackages = 'Python packages other than the standard library are not available ' +
  'here: the node runs Pyodide offline (no loadPackage, no micropip)';

// The Python half of the handler, run once in each interpreter.
const kPythonGlue = `
import json as _json, sys as _sys, types as _types, inspect as _inspect

class _Text(str):
    def __await__(self):
        if False:
            yield
        return str(self)

class _Bytes(bytes):
    def __await__(self):
        if False:
            yield
        return bytes(self)

class _Dict(dict):
    def __await__(self):
        if False:
            yield
        return dict(self)

class _List(list):
    def __await__(self):
        if False:
            yield
        return list(self)

def _awaitable(value):
    for plain, wrap in ((dict, _Dict), (list, _List), (str, _Text)):
        if type(value) is plain:
            return wrap(value)
    return value

class Request:
    """The request given to on_fetch: method, url, headers (a dict of
    lowercased names), and the body through text(), bytes() and json(),
    which can be awaited or not."""
    def __init__(self, method, url, headers, body):
        self.method = method
        self.url = url
        self.headers = headers
        self._body = body
    def bytes(self):
        return _Bytes(self._body)
    def text(self):
        return _Text(self._body.decode('utf-8', 'replace'))
    def json(self):
        return _awaitable(_json.loads(self._body.decode('utf-8')))

class Response:
    """What on_fetch may return (as may a str, bytes, dict or list)."""
    def __init__(self, body='', status=200, headers=None):
        self.body = body
        self.status = status
        self.headers = dict(headers or {})
    @staticmethod
    def json(value, status=200, headers=None):
        h = {'content-type': 'application/json'}
        h.update(headers or {})
        return Response(_json.dumps(value), status, h)

_workers = _types.ModuleType('workers')
_workers.Request = Request
_workers.Response = Response
_sys.modules['workers'] = _workers

def _answer(r):
    if isinstance(r, Response):
        body, status, headers = r.body, r.status, dict(r.headers)
    elif isinstance(r, (str, bytes, bytearray)):
        body, status, headers = r, 200, {}
    elif isinstance(r, (dict, list)):
        body, status, headers = _json.dumps(r), 200, {'content-type': 'application/json'}
    else:
        raise TypeError('on_fetch must return a str, bytes, dict, list or workers.Response, '
                        'not ' + type(r).__name__)
    if isinstance(body, str):
        body = body.encode('utf-8')
        headers.setdefault('content-type', 'text/plain;charset=UTF-8')
    elif not isinstance(body, (bytes, bytearray)):
        raise TypeError('a Response body must be str or bytes, not ' + type(body).__name__)
    return (int(status), _json.dumps(headers), bytes(body))

async def _answer_later(coro):
    return _answer(await coro)

def _fetch(ns, method, url, headers_json, body, env_json):
    handler = ns.get('on_fetch')
    if not callable(handler):
        raise TypeError('the Python module defines no on_fetch(request, env)')
    req = Request(method, url, _json.loads(headers_json), body.to_bytes())
    r = handler(req, _json.loads(env_json))
    return _answer_later(r) if _inspect.isawaitable(r) else _answer(r)

async def _result_later(coro):
    return _json.dumps(await coro)

def _run(ns, input_json, env_json):
    handler = ns.get('run')
    if not callable(handler):
        raise TypeError('the Python module defines no run(input)')
    args = [_json.loads(input_json)]
    if len(_inspect.signature(handler).parameters) > 1:
        args.append(_json.loads(env_json))
    r = handler(*args)
    return _result_later(r) if _inspect.isawaitable(r) else _json.dumps(r)

def _reseed():
    import random
    random.seed()
`;

const pythonShimmed = ['importScripts', 'location', 'fetch'];

// Pyodide's own boot, with the shims its loader needs in place only while
// it runs.
async function pythonBoot(options) {
  const WA = globalThis.WebAssembly;
  const saved = pythonShimmed.map((name) => Object.getOwnPropertyDescriptor(globalThis, name));
  const savedStreaming = WA.instantiateStreaming;
  const wasm = new Response(null, { headers: { 'content-type': 'application/wasm' } });
  const own = (url) => {
    const s = String(url);
    return s.startsWith(kPythonBase) ? s.slice(kPythonBase.length) : null;
  };
  const shims = {
    importScripts(...urls) {
      for (const url of urls) native.pythonScript(own(url) ?? '');
    },
    location: { href: kPythonBase, origin: new URL(kPythonBase).origin, toString: () => kPythonBase },
    async fetch(url) {
      const name = own(url);
      if (name === 'pyodide.asm.wasm') return wasm;
      if (name === null) throw new TypeError(kPythonNoPackages);
      return new Response(native.pythonFile(name));
    },
  };
  for (const name of pythonShimmed) defineGlobal(name, shims[name]);
  WA.instantiateStreaming = async (source, imports) => {
    if ((await source) !== wasm) return savedStreaming(source, imports);
    const module = native.pythonModule();
    return { module, instance: new WA.Instance(module, imports) };
  };
  try {
    if (typeof globalThis.loadPyodide !== 'function') native.pythonScript('pyodide.js');
    return await globalThis.loadPyodide({
      indexURL: kPythonBase,
      packages: [],
      stdout: (line) => console.log(line),
      stderr: (line) => console.error(line),
      ...options,
    });
  } finally {
    WA.instantiateStreaming = savedStreaming;
    pythonShimmed.forEach((name, i) => {
      if (saved[i]) Object.defineProperty(globalThis, name, saved[i]);
      else delete globalThis[name];
    });
  }
}

// The process's first interpreter is booted whole and leaves a memory
// snapshot of itself (taken before any glue or tenant code ran in it);
// every later one is restored from that, about five times faster.
async function pythonInterpreter() {
  const snapshot = native.pythonSnapshot();
  let py;
  if (snapshot === null) {
    py = await pythonBoot({ _makeSnapshot: true });
    native.pythonKeepSnapshot(py.makeMemorySnapshot());
  } else {
    py = await pythonBoot({ _loadSnapshot: snapshot });
    // Its config would keep the snapshot's copy (~25 MB) alive for good.
    const config = py._module?.API?.config;
    if (config) config._loadSnapshot = null;
  }
  const refuse = async () => { throw new Error(kPythonNoPackages); };
  py.loadPackage = refuse;
  py.loadPackagesFromImports = refuse;
  py.runPython(kPythonGlue);
  return py;
}

// An interpreter booted ahead of time, before any tenant code is in the
// context (isolate/python.cc's pool); the first handler takes it.
let pythonPrepared = null;

function pythonPrepare() {
  pythonPrepared = pythonInterpreter();
  return pythonPrepared;
}

// The handler of one .py module. The interpreter and the module's globals
// live as long as the isolate, as a JavaScript module's do; an entry cut
// short at the CPU limit discards the isolate (run.cc), so a half-run
// interpreter never serves again.
// The bundle's other .py modules are files under /session, first on
// sys.path: `import helper` finds helper.py, `import lib.util` lib/util.py.
function pythonWriteModules(py, others) {
  for (const [file, text] of Object.entries(others)) {
    const at = `/session/${file}`;
    py.FS.mkdirTree(at.slice(0, at.lastIndexOf('/')));
    py.FS.writeFile(at, text);
  }
  py.runPython('import sys\nsys.path.insert(0, "/session")');
}

function pythonHandler(source, name, others = {}) {
  let state = null;
  function ready() {
    if (state === null) {
      const prepared = pythonPrepared;
      pythonPrepared = null;
      state = (async () => {
        const py = await (prepared ?? pythonInterpreter());
        const glue = py.globals;
        glue.get('_reseed')();
        pythonWriteModules(py, others);
        const ns = py.runPython('dict')();
        ns.set('__name__', '__main__');
        ns.set('__file__', name);
        py.runPython(source, { globals: ns, filename: name });
        return { py, glue, ns };
      })();
      state.catch(() => { state = null; });
    }
    return state;
  }
  const call = async (fn) => fn(await ready());
  // Python sees the plain bindings; binding objects (facets, loaders) are
  // left out rather than failing every request.
  const envJson = (env) => JSON.stringify(env ?? {}, (key, value) =>
    (key !== '' && value !== null && typeof value === 'object' &&
     Object.getPrototypeOf(value) !== Object.prototype && !Array.isArray(value) ? undefined : value));
  return {
    fetch(request, env) {
      return call(async ({ glue, ns }) => {
        const body = new Uint8Array(await request.arrayBuffer());
        const headers = {};
        for (const [k, v] of request.headers) headers[k] = v;
        const answer = await glue.get('_fetch')(ns, request.method, request.url,
          JSON.stringify(headers), body, envJson(env));
        const [status, headersJson, bytes] = answer.toJs();
        answer.destroy();
        return new Response(status === 204 || status === 304 ? null : bytes,
          { status, headers: JSON.parse(headersJson) });
      });
    },
    run(input, env) {
      return call(async ({ glue, ns }) => {
        const text = await glue.get('_run')(ns, JSON.stringify(input ?? null), envJson(env));
        return JSON.parse(text);
      });
    },
  };
}

defineGlobal(Symbol.for('edgenode.python'), pythonHandler);
defineGlobal(Symbol.for('edgenode.python.prepare'), pythonPrepare);

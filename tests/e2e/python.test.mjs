// Python workers on Pyodide (docs/python.md): a .py main module deployed
// (on_fetch) and in /v1/run (run(input)), print as logs, Python exceptions
// with their traceback, the standard library against Debian's python3,
// packages refused offline, the CPU and memory limits, module globals kept
// by a deployed worker and never by runs, and each run's own random state.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { missingInput, startNode, tempDir, writeFile } from './lib/node.mjs';
import { cacheRoot, npmInstall } from '../compat/lib/npm.mjs';

const PYODIDE = 'pyodide@0.27.7';
const prefix = path.join(cacheRoot(), 'pyodide-0.27.7');
const packageDir = path.join(prefix, 'node_modules', 'pyodide');

let node;
let missing = null;

before(async () => {
  const wasm = (p) => path.join(p, 'node_modules', 'pyodide', 'pyodide.asm.wasm');
  const installed = await npmInstall(PYODIDE, prefix, wasm);
  if (installed.skip) {
    missing = installed.skip;
    return;
  }
  const config = writeFile(tempDir(), 'edgenode.json', JSON.stringify({
    cordon_rules: [], python_dir: packageDir, python_pool: 2,
  }));
  // One worker process: the bombs and their neighbours share it.
  node = await startNode({ workers: 1, configFile: config });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

function needPyodide(t) {
  if (missing) missingInput(t, 'pyodide from npm', missing);
  return !missing;
}

async function run(code, input, extra = {}) {
  const body = { modules: { 'main.py': code }, main_module: 'main.py', ...extra };
  if (input !== undefined) body.input = input;
  return node.control('POST', '/v1/run', { body });
}

test('a deployed on_fetch worker answers, with str, dict and Response results', async (t) => {
  if (!needPyodide(t)) return;
  await node.deployOk('pyfetch', {
    'main.py': `from workers import Response

def on_fetch(request, env):
    if request.url.endswith('/text'):
        return 'hello ' + request.method
    if request.url.endswith('/json'):
        return {'url': request.url, 'body': request.text(), 'agent': request.headers.get('x-agent')}
    return Response('made', status=201, headers={'x-python': 'yes'})
`,
  });
  const text = await node.ingress('pyfetch', '/text');
  assert.equal(text.status, 200, text.text);
  assert.equal(text.text, 'hello GET');
  assert.match(text.headers['content-type'], /^text\/plain/);
  const json = await node.ingress('pyfetch', '/json', { method: 'POST', body: 'payload', headers: { 'x-agent': 'test' } });
  assert.equal(json.status, 200, json.text);
  assert.deepEqual(JSON.parse(json.text), { url: 'http://pyfetch.localhost/json', body: 'payload', agent: 'test' });
  const made = await node.ingress('pyfetch', '/');
  assert.equal(made.status, 201);
  assert.equal(made.text, 'made');
  assert.equal(made.headers['x-python'], 'yes');
});

test('an async on_fetch awaiting the request body works as in Python Workers', async (t) => {
  if (!needPyodide(t)) return;
  await node.deployOk('pyasync', {
    'main.py': `async def on_fetch(request, env):
    data = await request.json()
    return {'sum': sum(data)}
`,
  });
  const r = await node.ingress('pyasync', '/', { method: 'POST', body: '[1, 2, 3]' });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(JSON.parse(r.text), { sum: 6 });
});

test('env holds the plain bindings; binding objects are left out', async (t) => {
  if (!needPyodide(t)) return;
  await node.deployOk('pyenv', {
    'main.py': 'def on_fetch(request, env):\n    return {"keys": sorted(env), "greeting": env["GREETING"], "conf": env["CONF"]}\n',
  }, { bindings: { GREETING: { type: 'text', value: 'hi' }, CONF: { type: 'json', value: { retries: 3 } },
    DB: { type: 'facet' } } });
  const r = await node.ingress('pyenv', '/', { timeout: 60000 });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(JSON.parse(r.text), { keys: ['CONF', 'GREETING'], greeting: 'hi', conf: { retries: 3 } });
});

test('the bundle\'s other .py modules are importable', async (t) => {
  if (!needPyodide(t)) return;
  const r = await node.control('POST', '/v1/run', { body: {
    main_module: 'main.py',
    modules: {
      'main.py': 'import helper\nfrom lib import util\ndef run(input):\n    return [helper.twice(input), util.shout("hi")]\n',
      'helper.py': 'def twice(x):\n    return 2 * x\n',
      'lib/util.py': 'def shout(s):\n    return s.upper() + "!"\n',
    },
    input: 21,
  } });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.result, [42, 'HI!']);
});

test('run(input) returns its result, and print() lines are the logs', async (t) => {
  if (!needPyodide(t)) return;
  const r = await run('def run(input):\n    print("got", input["a"])\n    return {"doubled": input["a"] * 2}\n', { a: 21 });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.result, { doubled: 42 });
  assert.deepEqual(r.json.logs.map((l) => [l.level, l.message]), [['info', 'got 21']]);
  assert.equal(r.json.cold, true);
});

test('a Python exception is the run\'s exception, with the Python traceback', async (t) => {
  if (!needPyodide(t)) return;
  const r = await run('def divide(x):\n    return x / 0\n\ndef run(input):\n    return divide(input)\n', 1);
  assert.equal(r.status, 500, r.text);
  assert.equal(r.json.kind, 'exception');
  assert.equal(r.json.exception.name, 'PythonError');
  const message = r.json.exception.message;
  assert.match(message, /^Traceback \(most recent call last\):/);
  assert.match(message, /File "main.py", line 5, in run/);
  assert.match(message, /File "main.py", line 2, in divide/);
  assert.match(message, /ZeroDivisionError: division by zero/);
  const syntax = await run('def run(input)\n    return 1\n', 1);
  assert.equal(syntax.status, 500, syntax.text);
  assert.match(syntax.json.exception.message, /File "main.py", line 1[\s\S]*SyntaxError/);
});

test('the standard library works offline and agrees with python3', async (t) => {
  if (!needPyodide(t)) return;
  const program = `import json, re, hashlib, datetime, base64, collections
def main():
    words = re.findall(r"[a-z]+", "the quick brown fox jumps over the lazy dog the end")
    return json.dumps({
        "counts": sorted(collections.Counter(words).most_common(3)),
        "sha256": hashlib.sha256(b"edgenode").hexdigest(),
        "md5": hashlib.md5(b"edgenode").hexdigest(),
        "date": (datetime.date(2024, 2, 28) + datetime.timedelta(days=2)).isoformat(),
        "weekday": datetime.date(2026, 12, 2).strftime("%A"),
        "b64": base64.b64encode(b"\\x00\\xffpython").decode(),
        "sub": re.sub(r"(\\w+)@(\\w+)", r"\\2 at \\1", "me@home you@work"),
    }, sort_keys=True)
`;
  const native = spawnSync('python3', ['-c', `${program}\nprint(main())`], { encoding: 'utf8' });
  if (native.status !== 0) return missingInput(t, 'python3', `python3 -c failed: ${native.stderr}`);
  // The first import of these modules costs tens of milliseconds of CPU (more
  // under the sanitizers): this test is about what they answer, not speed.
  const r = await run(`${program}\ndef run(input):\n    return main()\n`, null,
    { limits: { cpu_ms: 5000 } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.result, native.stdout.trim());
});

test('packages beyond the standard library fail clearly', async (t) => {
  if (!needPyodide(t)) return;
  const imported = await run('def run(input):\n    import numpy\n    return 1\n', null);
  assert.equal(imported.status, 500, imported.text);
  assert.match(imported.json.exception.message, /ModuleNotFoundError: .*numpy/);
  const loaded = await run(`import pyodide_js
async def run(input):
    await pyodide_js.loadPackage("numpy")
    return 1
`, null);
  assert.equal(loaded.status, 500, loaded.text);
  assert.match(loaded.json.exception.message, /Python packages other than the standard library are not available here/);
});

test('while True: pass gets the CPU 503, and the next request is served', async (t) => {
  if (!needPyodide(t)) return;
  await node.deployOk('pyspin', {
    'main.py': `calls = 0
def on_fetch(request, env):
    global calls
    calls += 1
    if request.url.endswith('/spin'):
        while True:
            pass
    return f'calls={calls}'
`,
  }, { limits: { cpu_ms: 200 } });
  const spin = await node.ingress('pyspin', '/spin', { timeout: 60000 });
  assert.equal(spin.status, 503, spin.text);
  assert.match(spin.text, /exceeded CPU limit/);
  // The interpreter stopped mid-instruction is never used again: a fresh one serves.
  const next = await node.ingress('pyspin', '/', { timeout: 60000 });
  assert.equal(next.status, 200, next.text);
  assert.equal(next.text, 'calls=1');
});

test('a memory bomb is bounded: MemoryError or the memory 503, neighbours served', async (t) => {
  if (!needPyodide(t)) return;
  await node.deployOk('pyneighbour', { 'main.py': 'def on_fetch(request, env):\n    return "still here"\n' });
  assert.equal((await node.ingress('pyneighbour', '/', { timeout: 60000 })).text, 'still here');
  // A refused grow makes V8 try copies of the Memory: that takes more than
  // the default 50 ms of CPU before the limit is reached.
  const r = await run('def run(input):\n    b = bytearray(10**9)\n    return len(b)\n', null,
    { limits: { cpu_ms: 10000 } });
  assert.ok(r.status === 500 || r.status === 503, r.text);
  if (r.status === 500) assert.match(r.json.exception.message, /MemoryError/);
  else assert.match(r.json.error, /exceeded memory limit/);
  const neighbour = await node.ingress('pyneighbour', '/', { timeout: 60000 });
  assert.equal(neighbour.status, 200);
  assert.equal(neighbour.text, 'still here');
  const after = await run('def run(input):\n    return sum(range(10))\n', null);
  assert.equal(after.json.result, 45);
});

test('a deployed worker keeps module globals across requests; runs never share them', async (t) => {
  if (!needPyodide(t)) return;
  const counter = 'count = 0\ndef bump():\n    global count\n    count += 1\n    return count\n';
  await node.deployOk('pycount', { 'main.py': `${counter}def on_fetch(request, env):\n    return str(bump())\n` });
  assert.equal((await node.ingress('pycount', '/')).text, '1');
  assert.equal((await node.ingress('pycount', '/')).text, '2');
  const code = `${counter}import builtins\ndef run(input):\n    seen = getattr(builtins, 'edgenode_seen', None)\n    builtins.edgenode_seen = True\n    return [bump(), seen]\n`;
  for (let i = 0; i < 2; i++) {
    const r = await run(code, null);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.result, [1, null]);
  }
});

test('each run has its own random state, reseeded after its restore', async (t) => {
  if (!needPyodide(t)) return;
  // Runs restored from one snapshot share its hash() key (docs/python.md,
  // Safety); random is reseeded in each.
  const code = 'import random\ndef run(input):\n    return [random.random(), random.getrandbits(64)]\n';
  const a = await run(code, null);
  const b = await run(code, null);
  assert.equal(a.status, 200, a.text);
  assert.equal(b.status, 200, b.text);
  assert.notEqual(a.json.result[0], b.json.result[0]);
  assert.notEqual(a.json.result[1], b.json.result[1]);
});

test('a .py module name is accepted and a bad one still names the rule', async (t) => {
  if (!needPyodide(t)) return;
  const r = await node.control('POST', '/v1/run', { body: { modules: { 'main.rb': 'x' }, input: 1 } });
  assert.equal(r.status, 400);
  assert.match(r.json.error, /ending in \.js, \.mjs, \.ts, \.mts, \.wasm or \.py/);
});

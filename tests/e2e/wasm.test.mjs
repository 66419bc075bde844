// WebAssembly in workers, loader children and /v1/run: compiling and
// instantiating (plain and streaming), .wasm modules in specs, wasm code
// under the CPU limit, wasm memory under the memory limit with the worker
// process's resident set bounded and a neighbour served, and a real wasm
// library from npm (hash-wasm) giving the results it gives in Node.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, test } from 'node:test';
import { missingInput, noCordonConfig, startNode, tempDir, writeFile } from './lib/node.mjs';
import { cacheRoot, npmInstall } from '../compat/lib/npm.mjs';

// Tiny modules, written out byte by byte (no toolchain needed).
const HEADER = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];
// (func (export "add") (param i32 i32) (result i32) local.get 0 local.get 1 i32.add)
const ADD = Uint8Array.from([...HEADER,
  0x01, 0x07, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x01, 0x7f,
  0x03, 0x02, 0x01, 0x00,
  0x07, 0x07, 0x01, 0x03, 0x61, 0x64, 0x64, 0x00, 0x00,
  0x0a, 0x09, 0x01, 0x07, 0x00, 0x20, 0x00, 0x20, 0x01, 0x6a, 0x0b]);
// (func (export "spin") (loop br 0))
const SPIN = Uint8Array.from([...HEADER,
  0x01, 0x04, 0x01, 0x60, 0x00, 0x00,
  0x03, 0x02, 0x01, 0x00,
  0x07, 0x08, 0x01, 0x04, 0x73, 0x70, 0x69, 0x6e, 0x00, 0x00,
  0x0a, 0x09, 0x01, 0x07, 0x00, 0x03, 0x40, 0x0c, 0x00, 0x0b, 0x0b]);
// (memory (export "mem") 1) (func (export "grow") (param i32) (result i32) local.get 0 memory.grow)
const GROW = Uint8Array.from([...HEADER,
  0x01, 0x06, 0x01, 0x60, 0x01, 0x7f, 0x01, 0x7f,
  0x03, 0x02, 0x01, 0x00,
  0x05, 0x03, 0x01, 0x00, 0x01,
  0x07, 0x0e, 0x02, 0x04, 0x67, 0x72, 0x6f, 0x77, 0x00, 0x00, 0x03, 0x6d, 0x65, 0x6d, 0x02, 0x00,
  0x0a, 0x08, 0x01, 0x06, 0x00, 0x20, 0x00, 0x40, 0x00, 0x0b]);

const b64 = (bytes) => Buffer.from(bytes).toString('base64');
const bytesJs = (bytes) => `Uint8Array.from(atob(${JSON.stringify(b64(bytes))}), (c) => c.charCodeAt(0))`;

let node;

before(async () => {
  // One worker process: the bombs and their neighbour share it.
  node = await startNode({ workers: 1, configFile: noCordonConfig() });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : 0;
}

test('compile, instantiate and their streaming forms from a Response', async () => {
  await node.deployOk('wasmapi', `const bytes = ${bytesJs(ADD)};
export default {
  async fetch(request) {
    const out = {};
    const m = await WebAssembly.compile(bytes);
    out.compile = new WebAssembly.Instance(m).exports.add(1, 2);
    const { module, instance } = await WebAssembly.instantiate(bytes);
    out.instantiate = [module instanceof WebAssembly.Module, instance.exports.add(3, 4)];
    out.fromModule = (await WebAssembly.instantiate(m)).exports.add(5, 6);
    const wasm = () => new Response(bytes, { headers: { 'content-type': 'application/wasm' } });
    out.streaming = (await WebAssembly.instantiateStreaming(wasm())).instance.exports.add(7, 8);
    out.promised = (await WebAssembly.instantiateStreaming(Promise.resolve(wasm()))).instance.exports.add(1, 1);
    out.compileStreaming = new WebAssembly.Instance(await WebAssembly.compileStreaming(wasm())).exports.add(2, 2);
    const fails = async (p) => { try { await p; return 'ok'; } catch (e) { return e.name + ': ' + e.message; } };
    out.badType = await fails(WebAssembly.instantiateStreaming(new Response(bytes)));
    out.notResponse = await fails(WebAssembly.compileStreaming(bytes));
    out.badBytes = await fails(WebAssembly.compile(new Uint8Array([1, 2, 3])));
    out.validate = [WebAssembly.validate(bytes), WebAssembly.validate(new Uint8Array(4))];
    return Response.json(out);
  },
};`);
  const r = await node.ingress('wasmapi', '/');
  assert.equal(r.status, 200, r.text);
  const out = JSON.parse(r.text);
  assert.equal(out.compile, 3);
  assert.deepEqual(out.instantiate, [true, 7]);
  assert.equal(out.fromModule, 11);
  assert.equal(out.streaming, 15);
  assert.equal(out.promised, 2);
  assert.equal(out.compileStreaming, 4);
  assert.match(out.badType, /^TypeError: .*Content-Type must be application\/wasm, got none/);
  assert.match(out.notResponse, /^TypeError: .*must be a Response/);
  assert.match(out.badBytes, /^CompileError/);
  assert.deepEqual(out.validate, [true, false]);
});

test('a .wasm module in a deployed spec is a WebAssembly.Module', async () => {
  await node.deployOk('wasmmod', {
    'index.js': `import mod from './lib/add.wasm';
export default {
  fetch() {
    return new Response(mod instanceof WebAssembly.Module ? String(new WebAssembly.Instance(mod).exports.add(20, 22)) : 'no');
  },
};`,
    'lib/add.wasm': { wasm: b64(ADD) },
  });
  const r = await node.ingress('wasmmod', '/');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.text, '42');
});

test('a bad .wasm module is refused with a clear error', async () => {
  let r = await node.deploy('wasmbad', { 'index.js': 'export default {}', 'a.wasm': 'AGFzbQ==' });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.module, 'a.wasm');
  assert.match(r.json.error, /a \.wasm module is an object \{"wasm": base64/);
  r = await node.deploy('wasmbad', { 'index.js': 'export default {}', 'a.wasm': { wasm: 'not base64!' } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /standard base64/);
  r = await node.deploy('wasmbad', {
    'index.js': `import m from './a.wasm'; export default { fetch() { return new Response('x'); } };`,
    'a.wasm': { wasm: b64([1, 2, 3, 4]) },
  });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.module, 'a.wasm', r.text);
  assert.match(r.json.error, /^CompileError: WasmModuleObject::Compile\(\): expected magic word 00 61 73 6d, found 01 02 03 04 @\+0/);
});

test('wasm in /v1/run and in a loader child', async () => {
  const run = await node.control('POST', '/v1/run', {
    body: {
      main_module: 'r.js',
      modules: {
        'r.js': `import m from './add.wasm'; export function run(input) { return new WebAssembly.Instance(m).exports.add(input.a, input.b); }`,
        'add.wasm': { wasm: b64(ADD) },
      },
      input: { a: 40, b: 2 },
    },
  });
  assert.equal(run.status, 200, run.text);
  assert.equal(run.json.result, 42);

  await node.deployOk('wasmparent', `const bytes = ${bytesJs(ADD)};
export default {
  async fetch(request, env) {
    const child = env.LOADER.load({
      compatibilityDate: '2025-01-01',
      mainModule: 'index.js',
      modules: {
        'index.js': "import m from './add.wasm'; import n from './add.bin'; " +
          "export default { fetch() { return new Response(String(new WebAssembly.Instance(m).exports.add(1, 41)) + ' ' + " +
          "String(new WebAssembly.Instance(n).exports.add(2, 2))); } };",
        'add.wasm': { wasm: bytes },
        'add.bin': { wasm: bytes.buffer },
      },
    });
    let misnamed;
    try {
      await env.LOADER.load({ compatibilityDate: '2025-01-01', mainModule: 'a.js',
        modules: { 'a.js': 'export default {}', 'b.wasm': { js: '' } } }).getEntrypoint().fetch(request);
    } catch (e) {
      misnamed = e.name + ': ' + e.message;
    }
    const res = await child.getEntrypoint().fetch(request);
    return new Response((await res.text()) + ' | ' + misnamed);
  },
};`, { json: true, bindings: { LOADER: { type: 'loader' } } });
  const r = await node.ingress('wasmparent', '/');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.text, "42 4 | TypeError: Module 'b.wasm': a module named '.wasm' must be a {wasm} module.");
});

test('a wasm spin loop gets the CPU 503 and the worker serves afterwards', async () => {
  await node.deployOk('wasmspin', `const m = new WebAssembly.Module(${bytesJs(SPIN)});
export default {
  fetch(request) {
    if (new URL(request.url).pathname === '/ok') return new Response('fine');
    new WebAssembly.Instance(m).exports.spin();
    return new Response('not reached');
  },
};`, { json: true, limits: { cpu_ms: 50 } });
  const r = await node.ingress('wasmspin', '/spin');
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json?.error, 'exceeded CPU limit', r.text);
  const ok = await node.ingress('wasmspin', '/ok');
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.text, 'fine');
});

test('a memory.grow bomb is refused at the memory limit, RSS bounded, a neighbour served', async (t) => {
  await node.deployOk('steady', `export default { fetch() { return new Response('steady'); } };`);
  // Each grown MiB is written to, page by page: resident, not only reserved.
  await node.deployOk('wasmbomb', `const m = new WebAssembly.Module(${bytesJs(GROW)});
export default {
  fetch(request) {
    const { grow, mem } = new WebAssembly.Instance(m).exports;
    let mib = 0;
    for (;;) {
      const before = grow(16);
      if (before === -1) break;
      const view = new Uint8Array(mem.buffer);
      for (let i = before * 65536; i < view.length; i += 4096) view[i] = 1;
      mib++;
    }
    let thrown = 'none';
    try { mem.grow(16); } catch (e) { thrown = e.name; }
    return Response.json({ mib, thrown });
  },
};`, { json: true, limits: { memory_mb: 64, cpu_ms: 5000 } });
  const [pid] = await node.workerPids();
  const before = rssBytes(pid);
  const r = await node.ingress('wasmbomb', '/');
  const grown = rssBytes(pid) - before;
  t.diagnostic(`${r.status} ${r.text}; the worker process grew by ${(grown / 1048576).toFixed(1)} MiB`);
  if (r.status === 200) {
    const out = JSON.parse(r.text);
    assert.ok(out.mib > 8 && out.mib <= 64, r.text);
    assert.equal(out.thrown, 'RangeError');
  } else {
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json?.error, 'exceeded memory limit', r.text);
  }
  // Unbounded, the bomb would have grown to 4 GiB.
  assert.ok(grown < 160 * 1024 * 1024, `the worker process grew by ${grown >> 20} MiB`);
  const n = await node.ingress('steady', '/');
  assert.equal(n.status, 200, n.text);
  assert.equal(n.text, 'steady');
  // The first request's Memory goes with its instance (the refused
  // reservation collects it): the same request grows as far again.
  if (r.status === 200) {
    const again = await node.ingress('wasmbomb', '/');
    assert.equal(again.status, 200, again.text);
    assert.deepEqual(JSON.parse(again.text), JSON.parse(r.text));
  }
});

test('a Memory made larger than the memory limit is the memory 503', async (t) => {
  await node.deployOk('wasmbig', `export default {
  fetch(request) {
    if (new URL(request.url).pathname === '/ok') return new Response('fine');
    const mem = new WebAssembly.Memory({ initial: 2048 });
    new Uint8Array(mem.buffer).fill(1);
    return new Response('not reached ' + mem.buffer.byteLength);
  },
};`, { json: true, limits: { memory_mb: 64, cpu_ms: 5000 } });
  const [pid] = await node.workerPids();
  const before = rssBytes(pid);
  const r = await node.ingress('wasmbig', '/');
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json?.error, 'exceeded memory limit', r.text);
  const grown = rssBytes(pid) - before;
  t.diagnostic(`the worker process grew by ${(grown / 1048576).toFixed(1)} MiB`);
  assert.ok(grown < 100 * 1024 * 1024, `the worker process grew by ${grown >> 20} MiB`);
  const ok = await node.ingress('wasmbig', '/ok');
  assert.equal(ok.status, 200, ok.text);
});

test('at most 16 live Memories per isolate: the next one is a RangeError', async () => {
  const r = await node.control('POST', '/v1/run', {
    body: {
      modules: {
        'r.js': `export function run() {
  const kept = [];
  try {
    for (;;) kept.push(new WebAssembly.Memory({ initial: 1 }));
  } catch (e) {
    return [kept.length, e.name + ': ' + e.message];
  }
}`,
      },
      input: null,
    },
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.result, [16, 'RangeError: WebAssembly.Memory(): could not allocate memory']);
});

test('hash-wasm from npm runs unchanged and agrees with Node', async (t) => {
  const prefix = path.join(cacheRoot(), 'hash-wasm-4.13.0');
  const file = (p) => path.join(p, 'node_modules', 'hash-wasm', 'dist', 'index.esm.js');
  const installed = await npmInstall('hash-wasm@4.13.0', prefix, file);
  if (installed.skip) return missingInput(t, 'hash-wasm', installed.skip);
  // The library's own file, with a handler after it. workerd cannot be the
  // referee here: it refuses to compile wasm from bytes ("Wasm code
  // generation disallowed by embedder"), which is how hash-wasm loads its
  // modules. The same file run by Node is.
  const hashes = `async function hashes(input) {
  return {
    md5: await md5(input),
    sha1: await sha1(input),
    sha256: await sha256(input),
    sha3: await sha3(input, 256),
    blake3: await blake3(input),
    xxhash64: await xxhash64(input),
    crc32: await crc32(input),
    argon2id: await argon2id({ password: input, salt: 'saltsaltsalt', parallelism: 1,
      iterations: 2, memorySize: 512, hashLength: 16, outputType: 'hex' }),
  };
}`;
  const library = readFileSync(file(prefix), 'utf8');
  const source = `${library}
${hashes}
export default {
  async fetch(request) {
    return Response.json(await hashes(await request.text()));
  },
};`;
  await node.deployOk('hashwasm', source, { json: true, limits: { cpu_ms: 2000 } });
  const input = 'The quick brown fox jumps over the lazy dog';
  const r = await node.ingress('hashwasm', '/', { method: 'POST', body: input });
  assert.equal(r.status, 200, r.text);
  const ours = JSON.parse(r.text);
  assert.equal(ours.md5, createHash('md5').update(input).digest('hex'));
  assert.equal(ours.sha256, createHash('sha256').update(input).digest('hex'));
  assert.equal(ours.sha3, createHash('sha3-256').update(input).digest('hex'));
  const inNode = writeFile(tempDir(), 'hashes.mjs', `${library}\n${hashes}\nexport { hashes };\n`);
  const { hashes: nodeHashes } = await import(pathToFileURL(inNode).href);
  assert.deepEqual(ours, await nodeHashes(input));
});

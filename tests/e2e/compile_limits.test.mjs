// Loading a module graph (compiling, linking, top-level code) counts against
// the CPU limit and is stopped at it: for a deploy's validation, for a
// load() child, and for top-level code that spins. The worker process
// answers its other tenants afterwards.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { noCordonConfig, sleep, startNode, waitFor } from './lib/node.mjs';

let node;
let pid;

before(async () => {
  // The loads below hit their limits on purpose: the cordon monitor would
  // move the tenants out mid-test.
  node = await startNode({ workers: 1, configFile: noCordonConfig() });
  [pid] = await node.workerPids();
  await node.deployOk('neighbour', 'export default { fetch() { return new Response("neighbour"); } };');
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

// CPU time (user + system) the worker process used so far, in ms.
function processCpuMs() {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 1000 / 100;
}

async function neighbourServed() {
  const r = await node.ingress('neighbour', '/');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.text, 'neighbour');
}

// 999 modules of top-level statements (about 10 KB each, 10 MB in all, the
// most a deploy may carry): V8 compiles each one's top level eagerly.
function heavyGraph() {
  const body = 'var a = 0;\n' + 'a = a + 1;\n'.repeat(900);
  const modules = { 'index.js': 'export default { fetch() { return new Response("heavy"); } };' };
  for (let i = 0; i < 999; i++) modules[`m${i}.js`] = body;
  return modules;
}

test('a deploy whose modules take long to compile is refused at its CPU limit, not after compiling them all', async () => {
  const modules = heavyGraph();
  // The whole graph compiled, under a limit it fits in: the yardstick.
  let before = processCpuMs();
  await node.deployOk('heavy-ok', modules, { limits: { cpu_ms: 30000 } });
  const whole = processCpuMs() - before;
  before = processCpuMs();
  const r = await node.deploy('heavy', modules, { limits: { cpu_ms: 20 } });
  const cut = processCpuMs() - before;
  assert.equal(r.status, 400, r.text);
  assert.deepEqual(r.json, { error: 'exceeded CPU limit', kind: 'cpu' });
  // Both include reading the 10 MB spec; only the first compiled every module.
  assert.ok(cut < whole / 2, `validation used ${cut} ms of CPU at a 20 ms limit; the whole graph takes ${whole} ms`);
  assert.equal((await node.control('GET', '/v1/workers/heavy')).status, 404);
  // Nothing of the validation runs on after its answer: the process idles.
  const answered = processCpuMs();
  await sleep(1500);
  const after = processCpuMs() - answered;
  assert.ok(after < 500, `the worker process used ${after} ms of CPU in the 1.5 s after the answer`);
  await neighbourServed();
  await node.control('DELETE', '/v1/workers/heavy-ok');
});

test('a deploy whose top-level code spins is refused with the CPU limit\'s error', async () => {
  const r = await node.deploy('spin-top', { 'index.js': 'for (;;) {}\nexport default {};' },
    { limits: { cpu_ms: 30 } });
  assert.equal(r.status, 400, r.text);
  assert.deepEqual(r.json, { error: 'exceeded CPU limit', kind: 'cpu' });
  await neighbourServed();
});

test('a load() whose modules take long to compile fails at the child\'s CPU limit; the CPU spent stays near it', async () => {
  // 1,000 modules of 50 KB of top-level statements: compiling all of them
  // takes the process seconds (about 3 s here).
  const parent = `export default {
    async fetch(request, env) {
      const body = 'var a = 0;\\n' + 'a = a + 1;\\n'.repeat(4500);
      const modules = { 'c.js': 'export default { fetch() { return new Response("child"); } };' };
      for (let i = 0; i < 999; i++) modules['m' + i + '.js'] = body;
      const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js', modules,
                                     limits: { cpuMs: 20 } });
      try {
        return new Response(await (await stub.getEntrypoint().fetch('http://c/')).text());
      } catch (err) {
        return new Response(err.name + ': ' + err.message);
      }
    },
  };`;
  await node.deployOk('compiler', { 'index.js': parent },
    { bindings: { LOADER: { type: 'loader' } }, limits: { cpu_ms: 2000, wall_ms: 60000 } });
  const r = await node.ingress('compiler', '/', { timeout: 60000 });
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /^Error: Dynamic Worker exceeded its CPU time limit \(20 ms\)/);
  await neighbourServed();
  // The failed start's CPU is the tenant's (reported each second): the
  // parent's own share and the child's, cut short at its 20 ms.
  let stats;
  await waitFor(async () => {
    stats = (await node.control('GET', '/v1/tenants/compiler')).json;
    return stats.cpu_limit_hits >= 1;
  }, { timeout: 5000, what: 'the child\'s limit hit in the tenant\'s figures' });
  // (Under 2 s, the parent's own limit: compiling every module would take many seconds;
  // the parent's share, building 999 sources, is most of it under the sanitizers.)
  assert.ok(stats.cpu_ms >= 20 && stats.cpu_ms < 2000, `the tenant used ${stats.cpu_ms} ms of CPU`);
  await node.control('DELETE', '/v1/workers/compiler');
});

test('a load() with one module over 4 MiB is refused before anything compiles', async () => {
  // One module's compile cannot be interrupted: 5 MB of statements held
  // the process's loop for over a second before this limit.
  const parent = `export default {
    async fetch(request, env) {
      const big = 'a=b+c*d-e/f;'.repeat(Math.ceil(5e6 / 12));
      const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js',
        modules: { 'c.js': 'export default { fetch() { return new Response("child"); } };', 'big.js': big } });
      try {
        return new Response(await (await stub.getEntrypoint().fetch('http://c/')).text());
      } catch (err) {
        return new Response(err.name + ': ' + err.message);
      }
    },
  };`;
  await node.deployOk('bigmodule', { 'index.js': parent },
    { bindings: { LOADER: { type: 'loader' } }, limits: { cpu_ms: 2000 } });
  const r = await node.ingress('bigmodule', '/', { timeout: 60000 });
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /a Dynamic Worker module is larger than 4 MiB/);
  await neighbourServed();
  await node.control('DELETE', '/v1/workers/bigmodule');
});

// Deploying through the control API and serving what was deployed:
// deploy / request / redeploy / delete / restart, multi-module workers,
// the read side of the API (list, show, node) and /healthz.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { SOURCE_DIR, startNode, waitFor, workerList } from './lib/node.mjs';

const HELLO = (greeting) => `
export default {
  async fetch(request, env, ctx) {
    return new Response(${JSON.stringify(greeting)});
  }
};
`;

const SLOW_V1 = `
export default {
  async fetch(request) {
    console.log('slow v1 started');
    await new Promise((resolve) => setTimeout(resolve, 500));
    return new Response("v1");
  }
};
`;

const FAST_V2 = `
export default {
  fetch(request) {
    return new Response("v2");
  }
};
`;

let node;
let dataDir;

before(async () => {
  node = await startNode({ workers: 2 });
  dataDir = node.dataDir;
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

function workersOf(json) {
  return Array.isArray(json) ? json : json?.workers;
}

test('deploy then request', async () => {
  const r = await node.deploy('hello', HELLO('hello, world'));
  assert.ok(r.status === 200 || r.status === 201, `deploy status ${r.status}: ${r.text}`);
  assert.equal(r.json?.name, 'hello', `deploy answer names the worker: ${r.text}`);
  assert.ok(Number.isInteger(r.json?.version) && r.json.version >= 1, `deploy answer has a version: ${r.text}`);

  const res = await node.ingress('hello', '/');
  assert.equal(res.status, 200, res.text);
  assert.equal(res.text, 'hello, world');
});

test('redeploy: in-flight request finishes on the old version, new ones get the new', async () => {
  const first = await node.deployOk('slow', SLOW_V1);
  const t0 = Date.now();
  const from = node.logs.length;
  const inflight = node.ingress('slow', '/');
  // the request is inside the isolate, waiting on its timer
  await node.waitForLog((l) => l.json?.tenant === 'slow' && l.raw.includes('slow v1 started'),
    { from, what: 'the request to start on v1' });
  const second = await node.deployOk('slow', FAST_V2);
  assert.ok(second.json.version > first.json.version,
    `version goes up on redeploy: ${first.json.version} -> ${second.json.version}`);

  // The change reaches the worker processes asynchronously; it must be
  // visible promptly, and once visible, stay.
  let firstNew;
  await waitFor(async () => {
    const r = await node.ingress('slow', '/');
    firstNew = firstNew ?? r.text;
    return r.text === 'v2';
  }, { timeout: 1000, interval: 20, what: 'v2 to be served' });
  const old = await inflight;
  assert.equal(old.status, 200);
  assert.equal(old.text, 'v1', 'the in-flight request finishes on the version it started on');
  assert.ok(Date.now() - t0 >= 450, 'the in-flight request really waited for its timer');
  for (let i = 0; i < 10; i++) {
    const r = await node.ingress('slow', '/');
    assert.equal(r.text, 'v2', `request ${i} after the redeploy`);
  }
  if (firstNew !== 'v2') {
    // not a failure of the contract above, but worth knowing when reading logs
    console.log(`note: first request right after the redeploy answer got ${JSON.stringify(firstNew)}`);
  }
});

test('delete: the worker is gone (404 JSON naming it)', async () => {
  await node.deployOk('doomed', HELLO('doomed'));
  assert.equal((await node.ingress('doomed', '/')).text, 'doomed');
  const del = await node.control('DELETE', '/v1/workers/doomed');
  assert.ok(del.status === 200 || del.status === 204, `DELETE status ${del.status}: ${del.text}`);

  const res = await waitFor(async () => {
    const r = await node.ingress('doomed', '/');
    return r.status === 404 ? r : null;
  }, { timeout: 1000, interval: 20, what: 'deleted worker to answer 404' });
  assert.match(res.headers['content-type'] ?? '', /application\/json/);
  assert.ok(res.json, `404 body is JSON: ${res.text}`);
  assert.ok(typeof res.json.error === 'string', `404 body has an error: ${res.text}`);
  assert.ok(JSON.stringify(res.json).includes('doomed'), `404 body names the worker: ${res.text}`);

  const show = await node.control('GET', '/v1/workers/doomed');
  assert.equal(show.status, 404);
  const list = await node.control('GET', '/v1/workers');
  assert.ok(!workersOf(list.json).some((w) => w.name === 'doomed'));
});

test('delete while a request is in flight: that request still finishes', async () => {
  await node.deployOk('leaving', SLOW_V1);
  const from = node.logs.length;
  const inflight = node.ingress('leaving', '/');
  await node.waitForLog((l) => l.json?.tenant === 'leaving' && l.raw.includes('slow v1 started'),
    { from, what: 'the request to start' });
  const del = await node.control('DELETE', '/v1/workers/leaving');
  assert.equal(del.status, 200, del.text);
  const r = await inflight;
  assert.equal(r.status, 200, r.text);
  assert.equal(r.text, 'v1');
  await waitFor(async () => (await node.ingress('leaving', '/')).status === 404,
    { timeout: 1000, interval: 20, what: 'the deleted worker to be gone' });
});

test('multi-module worker with relative imports', async () => {
  const modules = {
    'index.js': `
      import { shout } from './lib/util.js';
      export default { fetch(req) { return new Response(shout('multi')); } };
    `,
    'lib/util.js': `
      import { suffix } from '../shared.js';
      export function shout(s) { return s.toUpperCase() + suffix; }
    `,
    'shared.js': `export const suffix = '!';`,
  };
  const r = await node.deploy('multi', modules, { main: 'index.js' });
  assert.ok(r.status === 200 || r.status === 201, `deploy status ${r.status}: ${r.text}`);
  const res = await node.ingress('multi', '/');
  assert.equal(res.status, 200, res.text);
  assert.equal(res.text, 'MULTI!');
});

test('JSON deploy with limits; defaults filled when omitted', async () => {
  const r = await node.deploy('limited', { 'main.js': HELLO('limited') },
    { main: 'main.js', limits: { cpu_ms: 100, memory_mb: 64 }, bindings: {} });
  assert.ok(r.status === 200 || r.status === 201, `deploy status ${r.status}: ${r.text}`);
  assert.equal((await node.ingress('limited', '/')).text, 'limited');

  const show = await node.control('GET', '/v1/workers/limited');
  assert.equal(show.status, 200, show.text);
  assert.equal(show.json.name, 'limited');
  assert.equal(show.json.main_module, 'main.js');
  assert.deepEqual(show.json.limits, { cpu_ms: 100, memory_mb: 64, wall_ms: 30000 });

  const dflt = await node.control('GET', '/v1/workers/hello');
  assert.equal(dflt.status, 200, dflt.text);
  assert.deepEqual(dflt.json.limits, { cpu_ms: 50, memory_mb: 128, wall_ms: 30000 });
});

test('application/javascript deploy', async () => {
  const r = await node.control('PUT', '/v1/workers/plain', {
    body: HELLO('plain js'),
    headers: { 'content-type': 'application/javascript' },
  });
  assert.ok(r.status === 200 || r.status === 201, `deploy status ${r.status}: ${r.text}`);
  assert.equal((await node.ingress('plain', '/')).text, 'plain js');
});

test('GET /v1/workers lists and GET /v1/workers/{name} shows', async () => {
  const list = await node.control('GET', '/v1/workers');
  assert.equal(list.status, 200, list.text);
  assert.match(list.headers['content-type'] ?? '', /application\/json/);
  const names = workersOf(list.json)?.map((w) => w.name);
  assert.ok(Array.isArray(names), `list is an array or {workers: [...]}: ${list.text}`);
  for (const n of ['hello', 'slow', 'multi', 'limited', 'plain']) {
    assert.ok(names.includes(n), `${n} listed in ${list.text}`);
  }
  const slow = workersOf(list.json).find((w) => w.name === 'slow');
  assert.ok(slow.version >= 2, `list shows the version: ${JSON.stringify(slow)}`);

  const show = await node.control('GET', '/v1/workers/multi');
  assert.equal(show.status, 200, show.text);
  assert.equal(show.json.name, 'multi');
  assert.ok(Number.isInteger(show.json.version));
  assert.equal(show.json.main_module, 'index.js');
  const mods = Array.isArray(show.json.modules) ? show.json.modules : Object.keys(show.json.modules ?? {});
  assert.deepEqual([...mods].sort(), ['index.js', 'lib/util.js', 'shared.js']);
});

test('GET /v1/node: version, V8 version, uptime, worker processes', async () => {
  const info = await node.nodeInfo();
  const cmake = readFileSync(path.join(SOURCE_DIR, 'CMakeLists.txt'), 'utf8');
  const version = /project\(edgenode VERSION ([0-9.]+)/.exec(cmake)?.[1];
  assert.equal(info.version, version, `node version: ${JSON.stringify(info)}`);
  const v8 = info.v8 ?? info.v8_version;
  assert.match(String(v8), /^\d+\.\d+\.\d+/, `V8 version in ${JSON.stringify(info)}`);
  const uptimeKey = Object.keys(info).find((k) => k.startsWith('uptime'));
  assert.ok(uptimeKey && typeof info[uptimeKey] === 'number', `uptime in ${JSON.stringify(info)}`);

  const workers = workerList(info);
  assert.equal(workers.length, 2, `two worker processes in ${JSON.stringify(info)}`);
  for (const w of workers) {
    assert.ok(Number.isInteger(w.pid) && w.pid > 0, `worker pid in ${JSON.stringify(w)}`);
    assert.notEqual(w.pid, node.proc.pid);
    process.kill(w.pid, 0); // the process exists
  }
  assert.notEqual(workers[0].pid, workers[1].pid);
  assert.equal(node.readyLine.pid, node.proc.pid, 'ready line carries the supervisor pid');
  assert.equal(node.readyLine.workers, 2);
});

test('a module graph: 1,000 modules importing each other deploy and serve; 1,001 are refused', async () => {
  const modules = {};
  for (let i = 0; i < 1000; i++) {
    modules[`m${i}.js`] = i === 0 ? 'export const n = 1;'
      : `import { n as p } from './m${i - 1}.js'; export const n = p + 1;`;
  }
  modules['index.js'] = "import { n } from './m999.js';\n" +
    'export default { fetch() { return new Response(String(n)); } };';
  delete modules['m0.js'];
  modules['m0.js'] = 'export const n = 1;';
  // 1,001 modules with index.js: one too many
  const tooMany = await node.deploy('graph', modules, { main: 'index.js' });
  assert.equal(tooMany.status, 400, tooMany.text);
  assert.equal(tooMany.json.error, 'too many modules: 1001, at most 1000 in one worker');
  delete modules['m999.js'];
  modules['index.js'] = "import { n } from './m998.js';\n" +
    'export default { fetch() { return new Response(String(n)); } };';
  // evaluating a thousand modules counts against the CPU limit: room for slow builds
  const ok = await node.deploy('graph', modules, { main: 'index.js', limits: { cpu_ms: 10000 } });
  assert.equal(ok.status, 201, ok.text);
  const r = await node.ingress('graph', '/');
  assert.equal(r.text, '999');
});

test('/healthz needs no token', async () => {
  const r = await node.control('GET', '/healthz', { token: null });
  assert.equal(r.status, 200, r.text);
});

test('restart on the same data dir: still deployed', async () => {
  const code = await node.stop();
  assert.equal(code, 0, 'clean exit on SIGTERM');
  node = await startNode({ workers: 2, dataDir });
  for (const [name, body] of [['hello', 'hello, world'], ['slow', 'v2'], ['multi', 'MULTI!'], ['plain', 'plain js']]) {
    const res = await node.ingress(name, '/');
    assert.equal(res.status, 200, `${name}: ${res.text}`);
    assert.equal(res.text, body);
  }
  const show = await node.control('GET', '/v1/workers/limited');
  assert.equal(show.status, 200, show.text);
  assert.deepEqual(show.json.limits, { cpu_ms: 100, memory_mb: 64, wall_ms: 30000 });
  const gone = await node.ingress('doomed', '/');
  assert.equal(gone.status, 404);
});

test('every log line is a JSON object with time, level, process and msg', () => {
  assert.ok(node.logs.length > 5);
  assert.deepEqual(node.malformedLogs().map((l) => l.raw), []);
});

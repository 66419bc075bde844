// Isolate eviction: least recently used idle isolates go when a process's
// isolates exceed --isolate-memory-mb, and any isolate goes after
// --idle-timeout-s of idleness. The next request cold-starts the worker: a
// counter kept in a module global starts again from 1.
//
// Process statistics (GET /v1/node: workers[].isolates / evictions) and
// tenant statistics arrive about once a second, and the eviction sweep runs
// about once a second too: everything here is polled.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { readFileSync } from 'node:fs';
import { sleep, startNode, waitFor } from './lib/node.mjs';

const nodes = [];

after(async () => {
  for (const node of nodes) await node.stop({ clean: true });
});

async function start(extraArgs, env = {}) {
  const node = await startNode({ workers: 1, extraArgs, env });
  nodes.push(node);
  return node;
}

// A worker holding ~4 MiB of heap in a global (8 packed arrays of 64 Ki
// doubles), and a counter of the requests this isolate has served. Its
// CPU limit is raised so that building the arrays never fails a cold start
// on a busy machine.
const HEAVY = `const ballast = Array.from({ length: 8 }, () => new Array(65536).fill(1.5));
let served = 0;
export default {
  fetch() {
    served++;
    return new Response(String(served), { headers: { 'x-ballast': String(ballast.length) } });
  },
};
`;

const COUNTER = `let served = 0;
export default { fetch() { return new Response(String(++served)); } };
`;

async function count(node, name) {
  const r = await node.ingress(name, '/');
  assert.equal(r.status, 200, `${name}: ${r.status} ${r.text}`);
  assert.match(r.text, /^\d+$/, `${name}: ${r.text}`);
  return Number(r.text);
}

function proc(info) {
  assert.equal(info.workers.length, 1, JSON.stringify(info.workers));
  return info.workers[0];
}

async function tenant(node, name) {
  const r = await node.control('GET', `/v1/tenants/${name}`);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

test('over the heap budget, least recently used isolates are evicted; every worker still answers', async () => {
  const node = await start(['--isolate-memory-mb', '16']); // idle timeout: the default 300 s
  const names = Array.from({ length: 6 }, (_, i) => `heavy-${i}`);
  for (const name of names) await node.deployOk(name, { 'index.js': HEAVY }, { limits: { cpu_ms: 1000 } });

  for (const name of names) assert.equal(await count(node, name), 1, `${name} cold`);
  // the first is the least recently used: a second request keeps it in
  // the same isolate only while no sweep ran in between, so send none

  // the process figures and the tenants' heap figures come in one report:
  // poll until they agree, the newest is loaded, and the evictions have
  // settled (the same count for longer than a sweep and a report), so that
  // what the sweeps left can be checked against the budget here
  let settled = null; // { evictions, since } of the consistent reports seen
  const { info, heavy } = await waitFor(async () => {
    const p = proc(await node.nodeInfo());
    const list = (await node.control('GET', '/v1/tenants')).json.tenants.filter((t) => names.includes(t.name));
    const loaded = list.filter((t) => t.heap_used > 0);
    const consistent = loaded.length === p.isolates && loaded.some((t) => t.name === 'heavy-5');
    if (!consistent) settled = null;
    else if (settled === null || settled.evictions !== p.evictions) settled = { evictions: p.evictions, since: Date.now() };
    return settled && Date.now() - settled.since >= 2500 ? { info: p, heavy: list } : null;
  }, { timeout: 12000, interval: 100, what: 'a consistent report with the evictions settled' });

  // what is left fits in the budget
  const resident = heavy.filter((t) => t.heap_used > 0);
  const heapMiB = resident.reduce((sum, t) => sum + t.heap_used, 0) / 1048576;
  assert.ok(heapMiB <= 16 || resident.length === 1, `resident heap ${heapMiB.toFixed(1)} MiB`);
  assert.ok(info.evictions >= 3, `evictions: ${info.evictions}`);
  assert.ok(info.isolates <= 3, `isolates left: ${info.isolates}`);
  assert.ok(info.isolates >= 1, 'the most recently used one stays');
  for (const t of heavy) assert.ok(t.heap_peak >= 4 * 1048576, `${t.name} held its ballast: ${t.heap_peak}`);
  // the oldest went, the newest stayed
  assert.equal(heavy.find((t) => t.name === 'heavy-0').heap_used, 0);
  assert.deepEqual(heavy.find((t) => t.name === 'heavy-0').loaded_in, []);
  assert.ok(heavy.find((t) => t.name === 'heavy-5').heap_used > 0);

  // Most recently used first, so that no sweep can take one we are about
  // to ask: the newest still counts on, the evicted ones start again.
  const second = {};
  for (const name of [...names].reverse()) second[name] = await count(node, name);
  assert.equal(second['heavy-5'], 2, 'the most recently used isolate was kept');
  assert.equal(second['heavy-0'], 1, 'the least recently used isolate was evicted');
  const restarted = names.filter((n) => second[n] === 1);
  assert.ok(restarted.length >= 3, `cold starts again: ${JSON.stringify(second)}`);

  await waitFor(async () => (await tenant(node, 'heavy-0')).cold_starts === 2,
    { timeout: 4000, what: 'heavy-0 cold_starts 2' });
  assert.equal((await tenant(node, 'heavy-5')).cold_starts, 1);
  // and the budget keeps being enforced
  await waitFor(async () => proc(await node.nodeInfo()).evictions >= info.evictions + 3,
    { timeout: 6000, what: 'more evictions after the second round' });
});

test('an isolate idle longer than --idle-timeout-s is evicted; a busy one is not', async () => {
  const node = await start(['--isolate-memory-mb', '16', '--idle-timeout-s', '2']);
  await node.deployOk('idler', COUNTER);
  await node.deployOk('busy', COUNTER);
  assert.equal(await count(node, 'idler'), 1);
  assert.equal(await count(node, 'idler'), 2);
  const lastUse = Date.now();
  let busy = await count(node, 'busy');
  assert.equal(busy, 1);

  // keep "busy" in use every 400 ms until "idler" is gone
  let evictedAt = 0;
  let polls = 0;
  while (!evictedAt) {
    await sleep(400);
    assert.equal(await count(node, 'busy'), ++busy, 'busy keeps its isolate');
    const p = proc(await node.nodeInfo());
    if (p.evictions >= 1) evictedAt = Date.now();
    assert.ok(++polls < 20, `no eviction after ${Date.now() - lastUse} ms: ${JSON.stringify(p)}`);
  }
  const idleMs = evictedAt - lastUse;
  assert.ok(idleMs >= 1900, `evicted after only ${idleMs} ms idle`);
  const p = proc(await node.nodeInfo());
  assert.equal(p.evictions, 1, 'only the idle isolate went');
  assert.equal(p.isolates, 1, 'busy stays loaded');

  assert.equal(await count(node, 'idler'), 1, 'the idle worker cold-starts again');
  assert.equal(await count(node, 'busy'), ++busy);
  await waitFor(async () => (await tenant(node, 'idler')).cold_starts === 2,
    { timeout: 4000, what: 'idler cold_starts 2' });
  assert.equal((await tenant(node, 'busy')).cold_starts, 1);
});

// Garbage on every request, and a counter: compaction must keep the module's
// state while it gives back the heap the requests left.
const LITTERING = `let served = 0;
export default {
  fetch() {
    const junk = [];
    for (let i = 0; i < 5000; i++) junk.push({ i, s: 'item ' + i });
    return new Response(String(++served + junk.length - 5000));
  },
};
`;

test('an isolate idle for --compact-idle-s is compacted once and keeps its state; ' +
     'a busy one is not compacted, nor one under a longer setting', async () => {
  const node = await start(['--compact-idle-s', '3']);
  const patient = await start(['--compact-idle-s', '3600']);
  await node.deployOk('litter', LITTERING);
  await node.deployOk('busy', COUNTER);
  await patient.deployOk('litter', LITTERING);
  for (let i = 1; i <= 40; i++) assert.equal(await count(patient, 'litter'), i);
  const patientIdleFrom = Date.now();
  for (let i = 1; i < 40; i++) assert.equal(await count(node, 'litter'), i);
  const litterIdleFrom = Date.now();  // at most when its last request ended
  assert.equal(await count(node, 'litter'), 40);
  const heapBefore = await waitFor(async () => (await tenant(node, 'litter')).heap_used || false,
    { timeout: 4000, what: 'a heap figure for litter' });

  // "busy" is used every 400 ms throughout: it never becomes due
  let busy = 0;
  let compactedAt = 0;
  for (let polls = 0; !compactedAt; polls++) {
    await sleep(400);
    assert.equal(await count(node, 'busy'), ++busy);
    if (proc(await node.nodeInfo()).compactions >= 1) compactedAt = Date.now();
    assert.ok(polls < 40, 'no compaction within 16 s');
  }
  assert.ok(compactedAt - litterIdleFrom >= 3000,
    `compacted ${compactedAt - litterIdleFrom} ms after its last request, not 3 s`);
  // Two more sweeps: nothing else is due (litter was compacted for this idle
  // period, busy is in use).
  for (let i = 0; i < 6; i++) {
    await sleep(400);
    assert.equal(await count(node, 'busy'), ++busy);
  }
  assert.equal(proc(await node.nodeInfo()).compactions, 1);
  await waitFor(async () => (await tenant(node, 'litter')).heap_used <= heapBefore,
    { timeout: 4000, what: `litter's heap at most ${heapBefore} bytes after compaction` });

  assert.equal(await count(node, 'litter'), 41, 'module state survives compaction');
  assert.equal((await tenant(node, 'litter')).cold_starts, 1);

  // Past the default 5 s, a sweep and a round of statistics: still whole.
  await sleep(Math.max(0, patientIdleFrom + 7500 - Date.now()));
  assert.equal(proc(await patient.nodeInfo()).compactions, 0);
});

// The isolates' code pages mapped, executable, from the worker process's one
// copy of V8's builtins (docs/operations.md), as /proc shows them.
function sharedBuiltinMappings(pid) {
  return readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')
    .filter((line) => line.includes(' r-xp ') && line.includes('edgenode-builtins')).length;
}

test('isolates map their builtins from one copy, unless EDGENODE_SHARED_BUILTINS=off', async () => {
  for (const setting of ['default', 'off']) {
    const node = await start([], setting === 'off' ? { EDGENODE_SHARED_BUILTINS: 'off' } : {});
    const names = ['share-a', 'share-b', 'share-c'];
    for (const name of names) await node.deployOk(name, COUNTER);
    for (const name of names) assert.equal(await count(node, name), 1);
    const info = await node.nodeInfo();
    const [pid] = await node.workerPids();
    const mappings = sharedBuiltinMappings(pid);
    if (setting === 'off' || info.mpk_enabled) {
      // Under MPK each isolate's pages carry its key: nothing is shared.
      assert.equal(mappings, 0, `${setting}: no isolate maps the copy`);
    } else {
      assert.ok(mappings >= names.length, `one mapping per isolate, found ${mappings}`);
    }
    for (const name of names) assert.equal(await count(node, name), 2, `${name} still serves`);
    await node.stop({ clean: true });
    nodes.splice(nodes.indexOf(node), 1);
  }
});

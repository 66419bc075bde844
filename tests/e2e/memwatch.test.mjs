// The supervisor's memory backstop: a worker process whose resident memory
// passes worker_memory_mb is killed and replaced, the kill is logged and kept
// as an event, and the node serves on with a fresh process. A dedicated
// process over cordon_memory_mb is killed too, and that kill counts against
// its tenant (only its code runs there).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { dedicatedReady, sleep, startNode, tempDir, waitFor, writeFile } from './lib/node.mjs';

// Keeps 32 MiB more, touched, on every /grow: memory no limit of the
// tenant's own stops (1 GiB of heap allowed), only the process budget.
const GROWER = `const kept = [];
export default {
  fetch(request) {
    if (new URL(request.url).pathname === '/grow') kept.push(new Uint8Array(32 << 20).fill(7));
    return new Response(String(kept.length));
  },
};
`;

const dir = tempDir();
let node;

function config(values) {
  writeFile(dir, 'edgenode.json', JSON.stringify({ cordon_rules: [], ...values }));
}

before(async () => {
  config({ worker_memory_mb: 1048576 });
  node = await startNode({ workers: 1, configFile: `${dir}/edgenode.json` });
  await node.deployOk('grower', { 'index.js': GROWER }, { limits: { memory_mb: 1024, cpu_ms: 5000 } });
  await node.deployOk('steady', { 'index.js': `export default { fetch() { return new Response('steady'); } };` });
  assert.equal((await node.ingress('grower', '/')).text, '0');
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

async function workerRssMb() {
  const m = await node.control('GET', '/metrics');
  const line = m.text.match(/^edgenode_worker_resident_memory_bytes\{worker="1"\} (\S+)$/m);
  assert.ok(line, 'the worker process RSS is in /metrics');
  return Number(line[1]) / (1 << 20);
}

test('a worker process over its memory budget is killed, logged and replaced', async () => {
  // The budget sits 160 MiB above what the process holds now (the sanitizer
  // build holds far more than the normal one), set through a reload.
  const budget = Math.ceil(await workerRssMb()) + 160;
  const from = node.logs.length;
  config({ worker_memory_mb: budget });
  process.kill(node.proc.pid, 'SIGHUP');
  const reloaded = await node.waitForLog((l) => /^configuration reloaded/.test(l.json?.msg ?? ''),
    { from, timeout: 5000, what: 'the reload line' });
  assert.deepEqual(reloaded.json.changed.worker_memory_mb, { from: 1048576, to: budget });
  const [pidBefore] = await node.workerPids();
  node.allowCrashes = true; // the SIGKILL below is the point

  // Grow until the supervisor acts; the request that crosses the line may
  // be cut off with its process.
  for (let i = 0; i < 16 && !node.logs.slice(from).some((l) => /over its memory budget/.test(l.json?.msg ?? '')); i++) {
    await node.ingress('grower', '/grow').catch(() => null);
    await sleep(600); // the supervisor looks twice a second
  }
  const kill = await node.waitForLog((l) => /over its memory budget/.test(l.json?.msg ?? ''),
    { from, timeout: 5000, what: 'the memory kill' });
  assert.equal(kill.json.level, 'error');
  assert.equal(kill.json.worker, 1);
  assert.equal(kill.json.pid, pidBefore);
  assert.equal(kill.json.budget_mb, budget);
  assert.ok(kill.json.rss_mb > budget, kill.raw);

  const ev = await node.control('GET', '/v1/events?kind=memory_kill');
  assert.equal(ev.status, 200);
  assert.equal(ev.json.events[0].details.pid, pidBefore);

  // A fresh process serves both tenants; the grower starts from nothing.
  await waitFor(async () => {
    const pids = await node.workerPids();
    return pids.length === 1 && pids[0] !== pidBefore;
  }, { timeout: 15000, what: 'a new worker process' });
  await waitFor(async () => (await node.ingress('steady', '/').catch(() => ({}))).text === 'steady',
    { timeout: 15000, what: 'steady served again' });
  assert.equal((await node.ingress('grower', '/')).text, '0');
  assert.ok(await workerRssMb() < budget);
});

test('a dedicated process over cordon_memory_mb is killed, and the kill counts toward its tenant\'s suspension', async () => {
  const own = tempDir();
  const write = (values) => writeFile(own, 'edgenode.json', JSON.stringify({
    cordon_rules: [], cordon_suspend_crashes: 1, cordon_suspend_window_s: 600, ...values }));
  // Started with room to spare: the process's isolates get half of it.
  const n = await startNode({ workers: 1, configFile: write({ cordon_memory_mb: 1048576 }) });
  n.allowCrashes = true;
  try {
    await n.deployOk('hoarder', { 'index.js': GROWER }, { limits: { memory_mb: 1024, cpu_ms: 5000 } });
    const r = await n.control('POST', '/v1/tenants/hoarder/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    const t = await dedicatedReady(n, 'hoarder');
    const pid = t.dedicated.pid;
    assert.equal((await n.ingress('hoarder', '/')).text, '0');
    const rssMb = Number(readFileSync(`/proc/${pid}/status`, 'utf8').match(/^VmRSS:\s*(\d+) kB/m)[1]) / 1024;
    const budget = Math.ceil(rssMb) + 160;
    const from = n.logs.length;
    write({ cordon_memory_mb: budget });
    process.kill(n.proc.pid, 'SIGHUP');
    await n.waitForLog((l) => /^configuration reloaded/.test(l.json?.msg ?? ''),
      { from, timeout: 5000, what: 'the reload line' });
    const killed = () => n.logs.slice(from).some((l) => /over its memory budget/.test(l.json?.msg ?? ''));
    for (let i = 0; i < 16 && !killed(); i++) {
      await n.ingress('hoarder', '/grow').catch(() => null);
      await sleep(600); // the supervisor looks twice a second
    }
    const kill = await n.waitForLog((l) => /over its memory budget/.test(l.json?.msg ?? ''),
      { from, timeout: 5000, what: 'the memory kill' });
    assert.equal(kill.json.pid, pid);
    assert.equal(kill.json.tenant, 'hoarder');
    const crash = await waitFor(async () => {
      const ev = await n.control('GET', '/v1/events?tenant=hoarder&kind=crash');
      return ev.json.events.find((e) => e.details.pid === pid);
    }, { timeout: 5000, what: 'the crash event' });
    assert.equal(crash.details.reason, 'memory');
    assert.equal(crash.details.blamed, true);
    const suspended = await waitFor(async () => {
      const x = (await n.control('GET', '/v1/tenants/hoarder')).json;
      return x.state === 'suspended' ? x : null;
    }, { timeout: 5000, what: 'hoarder suspended (cordon_suspend_crashes 1)' });
    assert.equal(suspended.cause, 'crashes');
  } finally {
    await n.stop();
  }
});

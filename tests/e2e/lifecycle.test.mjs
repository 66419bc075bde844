// Processes coming and going: a worker process killed and restarted, SIGTERM
// with requests in flight, and how the node reads its flags and config file.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import {
  runEdgenode, sleep, startNode, tempDir, waitFor, workerList, writeFile,
} from './lib/node.mjs';

const HELLO = `export default { fetch() { return new Response('alive'); } };\n`;
const SLOW = `
export default {
  async fetch(request) {
    console.log('started ' + new URL(request.url).searchParams.get('i'));
    const ms = Number(new URL(request.url).searchParams.get('ms') ?? 1000);
    await new Promise((r) => setTimeout(r, ms));
    return new Response('done ' + new URL(request.url).searchParams.get('i'));
  }
};
`;

function connectOutcome(port) {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1' });
    s.on('connect', () => { s.destroy(); resolve('connected'); });
    s.on('error', (e) => resolve(e.code));
  });
}

test('a stopped worker process (SIGSTOP) is noticed within seconds and replaced', async (t) => {
  const node = await startNode({ workers: 2 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('hello', HELLO);
  const before = await node.workerPids();
  const victim = before[0];
  const from = node.logs.length;
  node.allowCrashes = true; // the kill that replaces it is logged as an exit
  const stoppedAt = Date.now();
  process.kill(victim, 'SIGSTOP');
  const line = await node.waitForLog((l) => /stopped answering/.test(l.json?.msg ?? '') &&
    l.json.pid === victim, { from, timeout: 10000, what: 'the supervisor noticing the stop' });
  const noticed = Date.now() - stoppedAt;
  assert.ok(noticed < 6000, `noticed after ${noticed} ms`);
  assert.equal(line.json.level, 'warn');
  const after = await waitFor(async () => {
    const pids = await node.workerPids();
    return pids.length === 2 && !pids.includes(victim) ? pids : null;
  }, { timeout: 5000, what: 'a new process in its slot' });
  assert.ok(after.every((p) => p !== victim));
  for (let i = 0; i < 10; i++) assert.equal((await node.ingress('hello', '/')).text, 'alive');
  // blamed on nobody: the crash event names no tenant
  const ev = (await node.control('GET', '/v1/events?kind=crash')).json.events.find((e) => e.details.pid === victim);
  assert.ok(ev, 'a crash event for the replaced process');
  assert.equal(ev.tenant, undefined);
  assert.equal(ev.details.reason, 'unresponsive');
});

test('a worker process killed with SIGKILL is restarted and requests keep succeeding', async (t) => {
  const node = await startNode({ workers: 2 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('hello', HELLO);

  const before = await node.workerPids();
  assert.equal(before.length, 2);
  const victim = before[0];
  const from = node.logs.length;
  node.allowCrashes = true; // the exit we cause is logged as one
  process.kill(victim, 'SIGKILL');

  // the other process keeps serving meanwhile
  for (let i = 0; i < 10; i++) {
    const r = await node.ingress('hello', '/');
    assert.equal(r.status, 200, `request ${i} right after the kill`);
    assert.equal(r.text, 'alive');
  }

  const restart = await node.waitForLog(
    (l) => /restart/i.test(l.json?.msg ?? '') && l.raw.includes(String(victim)),
    { from, timeout: 5000, what: 'a "restart" log line naming the killed pid' });
  assert.equal(restart.json.level, 'warn', restart.raw);
  assert.match(restart.raw, /SIGKILL|"signal":\s*9|signal 9|"signal":\s*"KILL"/i, `names the signal: ${restart.raw}`);

  assert.match(restart.raw, /"restarts":\s*1\b/, `restart count: ${restart.raw}`);
  assert.match(restart.raw, /"delay_ms":\s*100\b/, `first restart after 100 ms: ${restart.raw}`);

  const after = await waitFor(async () => {
    const pids = await node.workerPids();
    return pids.length === 2 && !pids.includes(victim) ? pids : null;
  }, { timeout: 5000, what: 'a new worker pid in GET /v1/node' });
  const fresh = after.find((p) => !before.includes(p));
  assert.ok(fresh, `a new pid: before ${before}, after ${after}`);
  process.kill(fresh, 0);

  const info = await node.nodeInfo();
  const slot = workerList(info).find((w) => w.pid === fresh);
  assert.ok(slot, 'the new process is listed');
  if (slot.restarts !== undefined) assert.ok(slot.restarts >= 1, `restart count: ${JSON.stringify(slot)}`);

  // a second quick death of the same slot waits twice as long
  const from2 = node.logs.length;
  process.kill(fresh, 'SIGKILL');
  const again = await node.waitForLog(
    (l) => /restart/i.test(l.json?.msg ?? '') && l.raw.includes(String(fresh)),
    { from: from2, timeout: 5000, what: 'the second restart line' });
  assert.match(again.raw, /"restarts":\s*2\b/, again.raw);
  assert.match(again.raw, /"delay_ms":\s*200\b/, `backoff doubles: ${again.raw}`);
  await waitFor(async () => {
    const pids = await node.workerPids();
    return pids.length === 2 && !pids.includes(fresh);
  }, { timeout: 5000, what: 'the slot to be refilled again' });

  // the restarted process serves too: enough connections that both processes take some
  const results = await Promise.all(Array.from({ length: 40 }, () => node.ingress('hello', '/')));
  assert.ok(results.every((r) => r.status === 200 && r.text === 'alive'));
  // a deploy after the restart reaches the new process as well
  await node.deployOk('hello', `export default { fetch() { return new Response('alive v2'); } };\n`);
  await waitFor(async () => {
    const rs = await Promise.all(Array.from({ length: 20 }, () => node.ingress('hello', '/')));
    return rs.every((r) => r.text === 'alive v2');
  }, { timeout: 2000, what: 'every process to serve the redeploy' });
});

test('SIGTERM with requests in flight: none dropped, exit 0, then refused', async () => {
  const node = await startNode({ workers: 2 });
  await node.deployOk('slow', SLOW);
  const port = node.listenPort;

  const inflight = Array.from({ length: 20 }, (_, i) =>
    node.ingress('slow', `/?ms=1000&i=${i}`, { timeout: 10000 }).then(
      (r) => ({ status: r.status, text: r.text }),
      (e) => ({ error: e.message })));
  // wait until all 20 are inside the isolates, waiting on their timers
  await waitFor(() => node.logs.filter((l) => l.json?.tenant === 'slow' && /^started \d+$/.test(l.json.msg)).length === 20,
    { timeout: 5000, what: '20 requests in flight' });
  const t0 = Date.now();
  node.proc.kill('SIGTERM');
  await sleep(150);
  // a new request during the drain is not served
  const during = node.ingress('slow', '/?ms=0&i=late', { timeout: 8000 }).then(
    (r) => ({ status: r.status, text: r.text }), (e) => ({ error: e.code ?? e.message }));

  const results = await Promise.all(inflight);
  results.forEach((r, i) => {
    assert.equal(r.status, 200, `in-flight request ${i}: ${JSON.stringify(r)}`);
    assert.equal(r.text, `done ${i}`);
  });
  const code = await node.stop({ signal: null, timeout: 10000 });
  assert.equal(code, 0, 'exit code after SIGTERM');
  assert.ok(Date.now() - t0 < 5000, `drained promptly (${Date.now() - t0} ms)`);
  const late = await during;
  assert.ok(late.error || late.status !== 200, `request started during the drain was served: ${JSON.stringify(late)}`);
  assert.equal(await connectOutcome(port), 'ECONNREFUSED', 'new connections refused after exit');
  assert.ok(!node.logs.some((l) => l.json?.level === 'error'), 'no error logged during a clean drain:\n' +
    node.logs.filter((l) => l.json?.level === 'error').map((l) => l.raw).join('\n'));
});

test('SIGINT drains and exits 0 too', async () => {
  const node = await startNode({ workers: 1 });
  await node.deployOk('slow', SLOW);
  const r = node.ingress('slow', '/?ms=300&i=x');
  await node.waitForLog((l) => l.json?.msg === 'started x', { what: 'the request in flight' });
  node.proc.kill('SIGINT');
  assert.equal((await r).text, 'done x');
  assert.equal(await node.stop({ signal: null, timeout: 10000 }), 0);
});

const GRACE_FLAG = '--grace-ms';

test('the grace period bounds the drain', async () => {
  const node = await startNode({ workers: 1, extraArgs: [GRACE_FLAG, '300'] });
  await node.deployOk('slow', SLOW);
  const r = node.ingress('slow', '/?ms=5000&i=x', { timeout: 8000 }).then(
    (res) => ({ status: res.status }), (e) => ({ error: e.message }));
  await node.waitForLog((l) => l.json?.msg === 'started x', { what: 'the request in flight' });
  const t0 = Date.now();
  node.proc.kill('SIGTERM');
  const code = await node.stop({ signal: null, timeout: 8000 });
  const took = Date.now() - t0;
  assert.equal(code, 0);
  assert.ok(took < 2500, `exited ${took} ms after SIGTERM with ${GRACE_FLAG} 300`);
  const res = await r;
  assert.ok(res.error || res.status >= 500, `cut-off request: ${JSON.stringify(res)}`);
});

// Two supervisors on one data directory would share its registry and facets,
// and the second removed the first's egress socket when it exited.
test('a second node on a data directory in use is refused, and the first is untouched', async (t) => {
  const node = await startNode({ workers: 1 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('hello', HELLO);
  const second = await runEdgenode(['--data', node.dataDir, '--listen', '127.0.0.1:0',
    '--control', '127.0.0.1:0', '--workers', '1']);
  assert.equal(second.code, 1, `exit ${second.code}, stderr ${second.stderr}`);
  assert.match(second.stderr, new RegExp(`data directory .* is in use by another edgenode \\(pid ${node.proc.pid}\\)`));
  assert.ok(existsSync(path.join(node.dataDir, 'egress', 'egress.sock')), 'the egress socket is still there');
  assert.equal((await node.ingress('hello', '/')).text, 'alive');
});

test('bad flags and bad config -> exit 2 naming the problem', async () => {
  const dir = tempDir();
  const bad = await runEdgenode(['--no-such-flag', '--data', dir]);
  assert.equal(bad.code, 2, `unknown flag: exit ${bad.code}, stderr ${bad.stderr}`);
  assert.match(bad.stderr, /no-such-flag/);

  for (const args of [['--workers', 'many'], ['--workers', '0'], ['--listen', 'nowhere'], ['--listen']]) {
    const r = await runEdgenode([...args, '--data', dir, '--control', '127.0.0.1:0']);
    assert.equal(r.code, 2, `${args.join(' ')}: exit ${r.code}, stderr ${r.stderr}`);
    assert.ok(r.stderr.length > 0, `${args.join(' ')}: says why`);
  }

  const cfg = writeFile(dir, 'bad-key.conf', JSON.stringify({ workers: 1, colour: 'blue' }));
  const r = await runEdgenode(['--config', cfg, '--data', dir, '--listen', '127.0.0.1:0', '--control', '127.0.0.1:0']);
  assert.equal(r.code, 2, `config with a bad key: exit ${r.code}, stderr ${r.stderr}`);
  assert.match(r.stderr, /colour/, 'stderr names the key');

  const badValue = writeFile(dir, 'bad-value.conf', JSON.stringify({ workers: 'lots' }));
  const r2 = await runEdgenode(['--config', badValue, '--data', dir, '--listen', '127.0.0.1:0', '--control', '127.0.0.1:0']);
  assert.equal(r2.code, 2, `config with a bad value: exit ${r2.code}, stderr ${r2.stderr}`);
  assert.match(r2.stderr, /workers/, 'stderr names the key');

  const unparsable = writeFile(dir, 'broken.conf', '{ "workers": ');
  const r3 = await runEdgenode(['--config', unparsable, '--data', dir]);
  assert.equal(r3.code, 2, `unparsable config: exit ${r3.code}, stderr ${r3.stderr}`);

  const missing = await runEdgenode(['--config', `${dir}/nope.conf`, '--data', dir]);
  assert.equal(missing.code, 2, `missing config file: exit ${missing.code}, stderr ${missing.stderr}`);
});

test('config file values are applied; flags override them', async (t) => {
  const dir = tempDir();
  const data = `${dir}/data`;
  const cfg = writeFile(dir, 'node.conf', JSON.stringify({
    listen: '127.0.0.1:0', control: '127.0.0.1:0', data, workers: 1,
  }));
  const node = await startNode({
    configFile: cfg, listen: null, control: null, workers: null, dataDir: null, expectDataDir: data,
  });
  t.after(() => node.stop({ clean: true }));
  assert.equal(node.readyLine.workers, 1, 'workers from the config file');
  assert.equal((await node.workerPids()).length, 1);
  await node.deployOk('hello', HELLO);
  assert.equal((await node.ingress('hello', '/')).text, 'alive');
  await node.stop();

  const node2 = await startNode({ configFile: cfg, workers: 2, dataDir: data });
  t.after(() => node2.stop({ clean: true }));
  assert.equal(node2.readyLine.workers, 2, 'the --workers flag wins over the config file');
  assert.equal((await node2.ingress('hello', '/')).text, 'alive', 'data dir from the config file');
});

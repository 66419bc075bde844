// Node operations: draining under load without cutting a response, config
// reloads on SIGHUP (rolling restarts that keep serving), systemd notification,
// the unit file and example config, the event history, and the edgectl
// commands built on them (tenants, tenant, drain, events, top).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import {
  EDGECTL, EDGENODE, missingInput, SOURCE_DIR, runProcess, sleep, startNode, tempDir, waitFor, workerList, writeFile,
} from './lib/node.mjs';

const BODY_BYTES = 64 * 1024;
// A response large enough to go out in several writes, so that a cut shows.
const LOAD = `
const BODY = 'x'.repeat(${BODY_BYTES});
export default {
  async fetch(request) {
    const url = new URL(request.url);
    const ms = Number(url.searchParams.get('ms') ?? 0);
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
    return new Response(BODY + '|' + url.searchParams.get('i'));
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

// One GET; never rejects. kind: 'response' (complete), 'cut' (bytes of the
// response had arrived when it failed), or 'error' (failed before any byte).
function attempt({ port, agent, urlPath, host }) {
  return new Promise((resolve) => {
    let responded = false;
    let settled = false;
    const done = (r) => { if (!settled) { settled = true; resolve(r); } };
    const req = http.request({
      host: '127.0.0.1', port, path: urlPath, agent, headers: { host }, timeout: 20000,
    }, (res) => {
      responded = true;
      const chunks = [];
      let ended = false;
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        ended = true;
        done({ kind: 'response', status: res.statusCode, body: Buffer.concat(chunks) });
      });
      res.on('error', (err) => done({ kind: 'cut', error: err.code ?? err.message }));
      res.on('close', () => { if (!ended) done({ kind: 'cut', error: 'closed before the end of the body' }); });
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', (err) => {
      if (responded) done({ kind: 'cut', error: err.code ?? err.message });
      else done({ kind: 'error', code: err.code ?? err.message, reused: req.reusedSocket });
    });
    req.end();
  });
}

// A steady load: `concurrency` loops over keep-alive connections, each sending
// requests back to back until stop() or, with untilRefused, until its first
// ECONNREFUSED. A request that fails before any byte of a response arrived
// was not served (the server closed an idle keep-alive connection, or reset a
// connection it never accepted); like any HTTP client, the loop sends it again
// on a fresh connection, where it completes or is refused.
function steadyLoad({ port, host, concurrency = 8, maxMs = 20, untilRefused = false }) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const stats = { completed: 0, refused: 0, resent: 0, resentReused: 0, bad: [] };
  let stopped = false;
  let seq = 0;
  const loop = async () => {
    while (!stopped) {
      const i = `${seq++}`;
      const urlPath = `/?ms=${Math.floor(Math.random() * maxMs)}&i=${i}`;
      let r = await attempt({ port, agent, urlPath, host });
      for (let tries = 0; r.kind === 'error' && r.code !== 'ECONNREFUSED' && tries < 3; tries++) {
        stats.resent++;
        if (r.reused) stats.resentReused++;
        r = await attempt({ port, agent: false, urlPath, host });
      }
      if (r.kind === 'response') {
        const text = r.body.toString('latin1');
        if (r.status === 200 && r.body.length === BODY_BYTES + 1 + i.length && text.endsWith(`|${i}`)) {
          stats.completed++;
        } else {
          stats.bad.push({ i, status: r.status, length: r.body.length, tail: text.slice(-40) });
        }
      } else if (r.kind === 'error' && r.code === 'ECONNREFUSED') {
        stats.refused++;
        if (untilRefused) return;
      } else {
        stats.bad.push({ i, ...r });
      }
    }
  };
  const loops = Array.from({ length: concurrency }, loop);
  const all = Promise.all(loops);
  return {
    stats,
    finished: all,
    async stop() { stopped = true; await all; agent.destroy(); return stats; },
  };
}

test('drain under a steady keep-alive load: every request completes or is refused, none is cut', async (t) => {
  const node = await startNode({ workers: 2 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('load', LOAD);
  for (let i = 0; i < 4; i++) assert.equal((await node.ingress('load', `/?i=w${i}`)).status, 200);

  const load = steadyLoad({ port: node.listenPort, host: 'load.localhost', concurrency: 8, untilRefused: true });
  await sleep(1000);
  const before = load.stats.completed;
  assert.ok(before > 10, `the load runs before the drain (${before} requests)`);
  // one slow request in flight when the drain starts: it must finish
  const slow = node.ingress('load', '/?ms=1500&i=slow', { timeout: 10000 }).then(
    (r) => ({ status: r.status, length: r.body.length, tail: r.text.slice(-5) }), (e) => ({ error: e.message }));
  await sleep(300);

  const t0 = Date.now();
  const atDrain = load.stats.completed;
  const drain = await node.control('POST', '/v1/node/drain');
  assert.equal(drain.status, 202, drain.text);
  assert.equal(drain.json.state, 'draining');
  const ready = await node.control('GET', '/readyz', { token: null });
  assert.equal(ready.status, 503, `readyz at once: ${ready.text}`);
  assert.equal(ready.json.error, 'the node is draining');

  // every loop ends on a refused connection: the listener is gone
  const timer = setTimeout(() => load.stop(), 15000);
  await load.finished;
  clearTimeout(timer);
  await load.stop();
  const s = load.stats;
  assert.deepEqual(s.bad, [], `requests cut or failed: ${JSON.stringify(s.bad.slice(0, 5))}`);
  assert.equal(s.refused, 8, `each of the 8 loops ended refused: ${JSON.stringify(s)}`);
  assert.ok(s.completed > before, `completed ${s.completed}`);

  const slowResult = await slow;
  assert.deepEqual(slowResult, { status: 200, length: BODY_BYTES + 5, tail: '|slow' }, 'the in-flight request finished');

  const info = await waitFor(async () => {
    const i = await node.nodeInfo();
    return i.state === 'drained' ? i : null;
  }, { timeout: 15000, what: 'GET /v1/node to say drained' });
  const took = Date.now() - t0;
  assert.ok(took >= 900, `the drain waited for the slow request (${took} ms)`);
  const stopped = workerList(info);
  assert.ok(stopped.length === 2 && stopped.every((w) => w.state === 'stopped'), JSON.stringify(info.workers));
  assert.equal(await connectOutcome(node.listenPort), 'ECONNREFUSED', 'new connections are refused');
  t.diagnostic(`drain: ${s.completed} completed (${s.completed - atDrain} finished after the drain began), ` +
    `${s.refused} refused, ${s.resent} resent (${s.resentReused} on reused keep-alive connections), ` +
    `drained in ${took} ms`);

  // the control API stays up, nothing was restarted, and the history has it
  assert.equal((await node.control('GET', '/healthz', { token: null })).status, 200);
  assert.ok(!node.logs.some((l) => /restarting/.test(l.json?.msg ?? '')), 'no worker process restarted');
  await node.waitForLog((l) => l.json?.msg === 'drained: every worker process has finished', { what: 'the drained line' });
  const events = (await node.control('GET', '/v1/events')).json.events;
  assert.equal(events[0].kind, 'drained', JSON.stringify(events.slice(0, 3)));
  assert.equal(events[1].kind, 'drain');
  assert.equal(events[1].details.reason, 'api');
  const again = await node.control('POST', '/v1/node/drain');
  assert.equal(again.status, 200, again.text);
  assert.equal(again.json.state, 'drained');
  const deploy = await node.deploy('late', LOAD);
  assert.equal(deploy.status, 503, `no deploys on a drained node: ${deploy.text}`);
  assert.equal((await node.control('GET', '/v1/node/drain')).status, 405);

  // SIGTERM then exits cleanly
  assert.equal(await node.stop({ clean: true }), 0);
});

// A worker process reports its statistics about once a second: one that
// exits must send what it counted since, or a drain or a rolling restart
// loses up to a second of requests from the tenants' counters.
test('requests served just before a drain are all counted', async (t) => {
  const node = await startNode({ workers: 2 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('counted', `export default { fetch() { return new Response('ok'); } };`,
    { json: true, limits: { cpu_ms: 1000 } }); // cold starts on sanitizer builds
  for (let i = 0; i < 30; i++) assert.equal((await node.ingress('counted', '/')).status, 200);
  assert.equal((await node.control('POST', '/v1/node/drain')).status, 202);
  await waitFor(async () => {
    const i = (await node.control('GET', '/v1/node')).json;
    return i.state === 'drained' ? i : null;
  }, { timeout: 15000, what: 'GET /v1/node to say drained' });
  const stats = (await node.control('GET', '/v1/tenants/counted')).json;
  assert.equal(stats.requests, 30, JSON.stringify(stats));
});

test('SIGTERM during an API drain exits once the drain is over', async () => {
  const node = await startNode({ workers: 1 });
  await node.deployOk('load', LOAD);
  const slow = node.ingress('load', '/?ms=800&i=s', { timeout: 10000 });
  await sleep(200);
  assert.equal((await node.control('POST', '/v1/node/drain')).status, 202);
  node.proc.kill('SIGTERM');
  assert.equal((await slow).status, 200);
  assert.equal(await node.stop({ signal: null, timeout: 10000, clean: true }), 0);
});

// ---- SIGHUP ----------------------------------------------------------------------------

function config(dir, values) {
  return writeFile(dir, 'node.json', JSON.stringify(values));
}

function cmdline(pid) {
  return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
}

function flagValue(pid, flag) {
  const args = cmdline(pid);
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

test('SIGHUP reloads the config file: rolling restarts keep serving, bad files change nothing', async (t) => {
  const dir = tempDir();
  const cfg = config(dir, { workers: 1, idle_timeout_s: 300, grace_ms: 5000 });
  const node = await startNode({ workers: null, configFile: cfg });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('load', LOAD);
  const [first] = await node.workerPids();
  assert.equal(flagValue(first, '--idle-timeout-s'), '300');

  // readiness must hold all along: a load balancer would pull the node otherwise
  const unready = [];
  let probing = true;
  const probe = (async () => {
    while (probing) {
      const r = await node.control('GET', '/readyz', { token: null });
      if (r.status !== 200) unready.push(r.text);
      await sleep(25);
    }
  })();
  const load = steadyLoad({ port: node.listenPort, host: 'load.localhost', concurrency: 4, maxMs: 10 });
  await sleep(300);

  const reload = async (values, what) => {
    config(dir, values);
    const from = node.logs.length;
    process.kill(node.proc.pid, 'SIGHUP');
    const line = await node.waitForLog((l) => /^configuration reloaded|^reload failed/.test(l.json?.msg ?? ''),
      { from, timeout: 5000, what: `the reload line (${what})` });
    if (line.json.rolling_restart) {
      await node.waitForLog((l) => l.json?.msg === 'rolling restart done', { from, timeout: 30000, what: `the roll (${what})` });
    }
    return line.json;
  };

  // one process, new worker flags: a second process serves while the first is replaced
  let r = await reload({ workers: 1, idle_timeout_s: 120, compact_idle_s: 10, grace_ms: 4000 }, 'idle timeout');
  assert.deepEqual(r.changed, {
    idle_timeout_s: { from: 300, to: 120 }, compact_idle_s: { from: 5, to: 10 }, grace_ms: { from: 5000, to: 4000 },
  });
  assert.equal(r.rolling_restart, true);
  let pids = await node.workerPids();
  assert.equal(pids.length, 1, `back to one process: ${pids}`);
  assert.notEqual(pids[0], first, 'the process was replaced');
  assert.equal(flagValue(pids[0], '--idle-timeout-s'), '120', 'with the new flags');
  assert.equal(flagValue(pids[0], '--compact-idle-s'), '10', 'with the new flags');

  // grow and shrink
  r = await reload({ workers: 3, idle_timeout_s: 120, compact_idle_s: 10, grace_ms: 4000 }, 'grow');
  assert.deepEqual(Object.keys(r.changed), ['workers']);
  assert.equal((await node.workerPids()).length, 3);
  assert.ok((await node.workerPids()).includes(pids[0]), 'growing leaves the running process alone');
  r = await reload({ workers: 2, idle_timeout_s: 120, compact_idle_s: 10, grace_ms: 4000 }, 'shrink');
  pids = await node.workerPids();
  assert.equal(pids.length, 2);
  assert.deepEqual(workerList(await node.nodeInfo()).map((w) => w.id), [1, 2]);

  // only grace_ms: nothing restarts
  r = await reload({ workers: 2, idle_timeout_s: 120, compact_idle_s: 10, grace_ms: 3000 }, 'grace only');
  assert.equal(r.rolling_restart, false);
  assert.deepEqual(await node.workerPids(), pids);

  // keys that need a node restart are named, not applied
  r = await reload({ workers: 2, idle_timeout_s: 120, compact_idle_s: 10, grace_ms: 3000, egress_allow_cidr: ['10.0.0.0/8'] }, 'fixed key');
  assert.deepEqual(r.needs_restart, ['egress_allow_cidr']);

  // a broken file: logged, nothing changes
  r = await reload({ workers: 0 }, 'bad file');
  assert.equal(r.ok, false);
  assert.match(r.error, /workers/);
  assert.deepEqual(await node.workerPids(), pids);

  await sleep(300);
  const s = await load.stop();
  probing = false;
  await probe;
  assert.deepEqual(s.bad, [], `requests failed during reloads: ${JSON.stringify(s.bad.slice(0, 5))}`);
  assert.equal(s.refused, 0, 'the ingress never refused a connection');
  assert.ok(s.completed > 50, `completed ${s.completed}`);
  assert.deepEqual(unready, [], '/readyz stayed 200');
  t.diagnostic(`reloads under load: ${s.completed} completed, ${s.resent} resent ` +
    `(${s.resentReused} on reused keep-alive connections closed by a draining process)`);
  const kinds = (await node.control('GET', '/v1/events?kind=reload')).json.events;
  assert.equal(kinds.length, 6, JSON.stringify(kinds));
  assert.equal(kinds[0].details.ok, false);
  assert.ok(!node.logs.some((l) => /restarting/.test(l.json?.msg ?? '')), 'no crash-restart during the reloads');
});

// ---- systemd -----------------------------------------------------------------------------

function linkedWithSystemd() {
  const r = spawnSync('ldd', [EDGENODE], { encoding: 'utf8' });
  return /libsystemd/.test(r.stdout ?? '');
}

function hasPython() {
  return spawnSync('python3', ['-c', 'import socket'], { encoding: 'utf8' }).status === 0;
}

const NOTIFY_LISTENER = `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("listening", flush=True)
while True:
    print(s.recv(4096).decode().replace("\\n", "|"), flush=True)
`;

test('sd_notify: READY, RELOADING, STOPPING', async (t) => {
  if (!hasPython()) return missingInput(t, 'python3 is missing (the datagram listener)', 'deploy/setup.sh installs it');
  if (!linkedWithSystemd()) {
    return missingInput(t, 'edgenode was built without libsystemd',
      'install libsystemd-dev (deploy/setup.sh does) and configure the build again');
  }
  const dir = tempDir();
  const sock = path.join(dir, 'notify.sock');
  const listener = spawn('python3', ['-c', NOTIFY_LISTENER, sock], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.after(() => listener.kill('SIGKILL'));
  const messages = [];
  let buf = '';
  listener.stdout.setEncoding('utf8');
  listener.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) { messages.push(buf.slice(0, i)); buf = buf.slice(i + 1); }
  });
  await waitFor(() => messages.includes('listening'), { what: 'the notify listener' });

  const cfg = config(dir, { workers: 1 });
  const node = await startNode({ workers: null, configFile: cfg, env: { NOTIFY_SOCKET: sock } });
  t.after(() => node.stop({ clean: true }));
  await waitFor(() => messages.some((m) => m.startsWith('READY=1')), { what: 'READY=1' });

  config(dir, { workers: 2 });
  process.kill(node.proc.pid, 'SIGHUP');
  await waitFor(() => messages.some((m) => m.startsWith('RELOADING=1|MONOTONIC_USEC=')), { what: 'RELOADING=1' });
  await waitFor(() => messages.filter((m) => m.startsWith('READY=1')).length === 2, { timeout: 15000, what: 'READY=1 after the roll' });

  await node.control('POST', '/v1/node/drain');
  await waitFor(() => messages.some((m) => m.startsWith('STOPPING=1')), { what: 'STOPPING=1' });
  await waitFor(() => messages.includes('STATUS=drained'), { timeout: 10000, what: 'STATUS=drained' });
  t.diagnostic(messages.slice(1).join('  /  '));
});

test('deploy/edgenode.service is a valid, hardened Type=notify unit', async (t) => {
  const unit = readFileSync(path.join(SOURCE_DIR, 'deploy/edgenode.service'), 'utf8');
  for (const line of ['Type=notify', 'ExecReload=/bin/kill -HUP $MAINPID', 'NoNewPrivileges=yes',
    'ProtectSystem=strict', 'ReadWritePaths=/var/lib/edgenode', 'PrivateTmp=yes', 'ProtectHome=yes',
    'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6', 'KillMode=mixed']) {
    assert.ok(unit.split('\n').includes(line), `the unit has ${line}`);
  }
  assert.match(unit, /^LimitNOFILE=\d+$/m);
  assert.doesNotMatch(unit, /^MemoryDenyWriteExecute/m, 'V8 needs writable then executable memory');
  const which = spawnSync('systemd-analyze', ['--version'], { encoding: 'utf8' });
  if (which.status !== 0) {
    t.skip('systemd-analyze missing: only the text was checked');
    return;
  }
  // verify wants ExecStart to exist: point it at this build
  const dir = tempDir();
  const copy = writeFile(dir, 'edgenode.service', unit.replace('/usr/local/bin/edgenode', EDGENODE));
  const r = spawnSync('systemd-analyze', ['verify', copy], { encoding: 'utf8' });
  const complaints = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.includes('edgenode.service'));
  assert.deepEqual(complaints, [], 'systemd-analyze verify has nothing to say');
});

test('deploy/edgenode.example.json starts a node, and every key is documented', async (t) => {
  const example = path.join(SOURCE_DIR, 'deploy/edgenode.example.json');
  const keys = Object.keys(JSON.parse(readFileSync(example, 'utf8')));
  const doc = readFileSync(path.join(SOURCE_DIR, 'docs/operations.md'), 'utf8');
  const section = doc.slice(doc.indexOf('### The example config file'));
  assert.ok(section.length > 100, 'docs/operations.md has a section on the example file');
  for (const k of keys) assert.match(section, new RegExp('`' + k + '`'), `the example's key ${k} is documented`);
  // the file's addresses, data dir and worker count are overridden by flags here
  const node = await startNode({ configFile: example, workers: 1 });
  t.after(() => node.stop({ clean: true }));
  assert.equal(node.readyLine.workers, 1);
});

// ---- events --------------------------------------------------------------------------------

test('GET /v1/events: deploys, deletes, crashes, restarts and drains, newest first, kept across restarts', async (t) => {
  const data = tempDir();
  const node = await startNode({ workers: 1, dataDir: data });
  await node.deployOk('alpha', LOAD);
  await node.deployOk('alpha', LOAD);
  await node.deployOk('beta', LOAD);
  assert.equal((await node.control('DELETE', '/v1/workers/beta')).status, 200);
  node.allowCrashes = true;
  const [victim] = await node.workerPids();
  process.kill(victim, 'SIGKILL');
  await waitFor(async () => (await node.workerPids()).some((p) => p !== victim), { what: 'the restart' });

  const all = (await node.control('GET', '/v1/events')).json.events;
  const kinds = all.map((e) => e.kind);
  assert.deepEqual(kinds, ['restart', 'crash', 'delete', 'deploy', 'deploy', 'deploy', 'start'], JSON.stringify(all));
  const ids = all.map((e) => e.id);
  assert.deepEqual([...ids].sort((a, b) => b - a), ids, 'newest first');
  const crash = all[1];
  assert.equal(crash.details.signal, 9);
  assert.equal(crash.details.pid, victim);
  assert.equal(all[0].details.restarts, 1);
  assert.deepEqual(all.slice(3, 6).map((e) => [e.tenant, e.details.version, e.details.created]),
    [['beta', 1, true], ['alpha', 2, false], ['alpha', 1, true]]);
  assert.equal(all[2].tenant, 'beta');
  assert.ok(!Number.isNaN(Date.parse(all[0].time)));

  const alpha = (await node.control('GET', '/v1/events?tenant=alpha')).json.events;
  assert.deepEqual(alpha.map((e) => e.kind), ['deploy', 'deploy']);
  assert.equal((await node.control('GET', '/v1/events?limit=2')).json.events.length, 2);
  assert.equal((await node.control('GET', '/v1/events?kind=crash')).json.events.length, 1);
  const bad = await node.control('GET', '/v1/events?limit=0');
  assert.equal(bad.status, 400, bad.text);
  assert.equal((await node.control('GET', '/v1/events', { token: null })).status, 401);
  assert.equal((await node.control('POST', '/v1/events')).status, 405);
  await node.stop();

  const again = await startNode({ workers: 1, dataDir: data });
  t.after(() => again.stop({ clean: true }));
  const after = (await again.control('GET', '/v1/events')).json.events;
  assert.deepEqual(after.map((e) => e.kind).slice(0, 3), ['start', 'drain', 'restart'], JSON.stringify(after.slice(0, 4)));
  assert.equal(after[1].details.signal, 'SIGTERM');
  assert.deepEqual(after.slice(2).map((e) => e.id), all.map((e) => e.id), 'the history survived the restart');
});

// ---- edgectl ----------------------------------------------------------------------------------

function edgectl(node, args, opts = {}) {
  return runProcess(EDGECTL, ['--node', `http://127.0.0.1:${node.controlPort}`, '--token-file', node.tokenFile, ...args], opts);
}

test('edgectl tenants, tenant, events, top and drain', async (t) => {
  const node = await startNode({ workers: 1 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('load', LOAD);
  await node.deployOk('idle', LOAD);
  for (let i = 0; i < 5; i++) assert.equal((await node.ingress('load', `/?i=${i}`)).status, 200);
  await waitFor(async () => (await node.control('GET', '/v1/tenants/load')).json.requests === 5, { what: 'statistics' });

  const tenants = await edgectl(node, ['tenants']);
  assert.equal(tenants.code, 0, tenants.stderr);
  const lines = tenants.stdout.trim().split('\n');
  assert.match(lines[0], /^NAME\s+STATE\s+REQUESTS\s+ERRORS\s+CPU_MS\s+HEAP$/);
  assert.match(lines.find((l) => l.startsWith('load ')), /^load\s+active\s+5\s+0\s+[\d.]+\s+[\d.]+ (B|KiB|MiB)$/);
  assert.match(lines.find((l) => l.startsWith('idle ')), /^idle\s+active\s+0\s+0/);
  const tj = JSON.parse((await edgectl(node, ['--json', 'tenants'])).stdout);
  assert.equal(tj.tenants.find((x) => x.name === 'load').requests, 5);

  const one = await edgectl(node, ['tenant', 'load']);
  assert.equal(one.code, 0, one.stderr);
  assert.match(one.stdout, /^requests:\s+5$/m);
  assert.match(one.stdout, /^state:\s+active$/m);
  const missing = await edgectl(node, ['tenant', 'ghost']);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /unknown tenant/);

  const ev = await edgectl(node, ['events']);
  assert.equal(ev.code, 0, ev.stderr);
  assert.match(ev.stdout, /^TIME\s+KIND\s+TENANT\s+DETAILS$/m);
  assert.match(ev.stdout, /deploy\s+idle\s+version=1 created=true/);
  const evj = JSON.parse((await edgectl(node, ['--json', 'events', 'load', '--limit', '1'])).stdout);
  assert.equal(evj.events.length, 1);
  assert.equal(evj.events[0].tenant, 'load');

  // top, not on a terminal: one snapshot with rates over a second
  const traffic = (async () => {
    for (let i = 0; i < 30; i++) { await node.ingress('load', `/?i=t${i}`); await sleep(40); }
  })();
  const top = await edgectl(node, ['top']);
  await traffic;
  assert.equal(top.code, 0, top.stderr);
  const topLines = top.stdout.trim().split('\n');
  assert.match(topLines[0], /^NAME\s+STATE\s+REQ\/S\s+ERR\/S\s+CPU_MS\/S\s+HEAP\s+REQUESTS$/);
  assert.equal(topLines.length, 3, top.stdout);
  assert.ok(!top.stdout.includes('\u001b'), 'no terminal escapes when not on a terminal');
  const topj = JSON.parse((await edgectl(node, ['--json', 'top'])).stdout);
  assert.deepEqual(Object.keys(topj.tenants[0]).sort(),
    ['cpu_ms_per_s', 'errors', 'errors_per_s', 'heap_used', 'name', 'requests', 'requests_per_s', 'state']);

  // top on a terminal (script(1) gives it one): refreshes, and q quits
  if (spawnSync('script', ['--version']).status === 0) {
    const proc = spawn('script', ['-qfec',
      `${EDGECTL} --node http://127.0.0.1:${node.controlPort} --token-file ${node.tokenFile} top`, '/dev/null'],
    { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    proc.stdout.on('data', (d) => { out += d; });
    const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
    await waitFor(() => (out.match(/edgectl top/g) ?? []).length >= 2, { timeout: 8000, what: 'two refreshes' });
    proc.stdin.write('q');
    const code = await Promise.race([exited, sleep(5000).then(() => 'still running')]);
    if (code === 'still running') proc.kill('SIGKILL');
    assert.equal(code, 0, `top quits on q:\n${out.slice(-500)}`);
    assert.match(out, /REQ\/S/);
    assert.match(out, /\u001b\[H\u001b\[2J/, 'clears the screen on each refresh');
  } else {
    t.diagnostic('script(1) missing: top on a terminal not tried');
  }

  const drained = await edgectl(node, ['drain']);
  assert.equal(drained.code, 0, drained.stderr);
  assert.match(drained.stdout, /^drained after [\d.]+ s$/m);
  assert.equal((await node.nodeInfo()).state, 'drained');
  const twice = await edgectl(node, ['--json', 'drain', '--no-wait']);
  assert.equal(twice.code, 0, twice.stderr);
  assert.equal(JSON.parse(twice.stdout).state, 'drained');
});

// The sandbox around worker processes and the egress, seen from outside as
// an operator would check it: each process's /proc status (a seccomp filter,
// no_new_privs), its namespaces (a worker's network, IPC and mount ones are
// its own, the egress keeps the supervisor's network: it is the way out), and
// what GET /v1/node reports. Then real worker processes, jailed, try what a
// tenant that took one over would (the test hook EDGENODE_TEST_JAIL_ATTEMPT,
// docs/operations.md "Sandbox"): each is refused or kills the process, and the
// kill is a sandbox_violation event naming the tenant that was running.
// Every system call of the jail on its own is tried in tests/unit/jail_test.c.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import net from 'node:net';
import { release } from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import {
  EDGENODE, dedicatedReady, missingInput, noCordonConfig, runEdgenode, runProcess, startNode,
  tempDir, waitFor, workerList, writeFile,
} from './lib/node.mjs';

let node;

function status(pid) {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name) => text.match(new RegExp(`^${name}:\\s*(\\S+)`, 'm'))?.[1];
  return { seccomp: field('Seccomp'), noNewPrivs: field('NoNewPrivs'), capEff: field('CapEff'), uid: field('Uid') };
}

const ns = (pid, kind) => readlinkSync(`/proc/${pid}/ns/${kind}`);
const netns = (pid) => ns(pid, 'net');

// The supervisor's children: the worker processes and the egress.
function children(pid) {
  const out = [];
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    const list = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
    if (list) out.push(...list.split(/\s+/).map(Number));
  }
  return out;
}

const comm = (pid) => readFileSync(`/proc/${pid}/comm`, 'utf8').trim();

async function readyWorkers(n, count) {
  return waitFor(async () => {
    const info = (await n.control('GET', '/v1/node')).json;
    const list = workerList(info).filter((w) => w.state === 'ready');
    return list.length === count ? list : null;
  }, { timeout: 15000, what: `${count} ready worker processes` });
}

before(async () => {
  node = await startNode({ workers: 2 });
  await node.deployOk('hello', `export default { fetch() { return new Response('hi'); } };`);
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

test('every worker process runs under seccomp and no_new_privs, in network, IPC and mount namespaces of its own', async () => {
  const workers = await readyWorkers(node, 2);
  const supervisor = node.proc.pid;
  for (const w of workers) {
    const s = status(w.pid);
    assert.equal(s.seccomp, '2', `worker ${w.pid}: Seccomp`);
    assert.equal(s.noNewPrivs, '1', `worker ${w.pid}: NoNewPrivs`);
    assert.equal(s.capEff, '0000000000000000', `worker ${w.pid}: no capabilities left`);
    for (const kind of ['net', 'ipc', 'mnt'])
      assert.notEqual(ns(w.pid, kind), ns(supervisor, kind), `worker ${w.pid}: ${kind} namespace`);
  }
  assert.notEqual(ns(workers[0].pid, 'ipc'), ns(workers[1].pid, 'ipc'), 'one IPC namespace per process');
  // Requests still arrive on the inherited listening socket.
  const r = await node.ingress('hello', '/');
  assert.equal(r.status, 200);
  assert.equal(r.text, 'hi');
});

test('the egress is sandboxed too, and keeps the network', async () => {
  const egress = await waitFor(() => children(node.proc.pid).find((pid) => comm(pid).startsWith('edgenode-egres')),
    { what: 'the egress process' });
  const s = status(egress);
  assert.equal(s.seccomp, '2');
  assert.equal(s.noNewPrivs, '1');
  assert.equal(netns(egress), netns(node.proc.pid));
  const info = (await node.control('GET', '/v1/node')).json;
  assert.equal(info.egress_sandbox.seccomp, 'on');
  assert.equal(info.egress_sandbox.landlock, 'on');
  assert.equal(info.egress_sandbox.netns, 'not_wanted');
});

test('GET /v1/node reports each sandbox layer of each worker process', async () => {
  const workers = await readyWorkers(node, 2);
  for (const w of workers) {
    assert.ok(w.sandbox, `worker ${w.pid} has a sandbox report`);
    for (const layer of ['seccomp', 'no_new_privs', 'landlock', 'netns', 'ipcns', 'mntns', 'caps'])
      assert.equal(w.sandbox[layer], 'on', `worker ${w.pid}: ${layer}`);
    assert.equal(w.sandbox.pidns, 'not_wanted');
  }
  const metrics = (await node.control('GET', '/metrics')).text;
  assert.match(metrics, /^edgenode_sandbox_layer\{layer="seccomp"\} 1$/m);
});

test('--require-sandbox starts where the kernel allows every layer; --no-sandbox turns it off', async () => {
  const strict = await startNode({ workers: 1, extraArgs: ['--require-sandbox'] });
  try {
    const [w] = await readyWorkers(strict, 1);
    assert.equal(status(w.pid).seccomp, '2');
  } finally {
    await strict.stop({ clean: true });
  }
  const off = await startNode({ workers: 1, extraArgs: ['--no-sandbox'] });
  try {
    const [w] = await readyWorkers(off, 1);
    assert.equal(status(w.pid).seccomp, '0');
    assert.equal(netns(w.pid), netns(off.proc.pid));
  } finally {
    await off.stop();
  }
});

const COUNTER = `export default {
  fetch(request, env) {
    env.DB.exec('CREATE TABLE IF NOT EXISTS hits (n INTEGER)');
    env.DB.exec('INSERT INTO hits VALUES (1)');
    return new Response(String(env.DB.exec('SELECT count(*) AS c FROM hits').one().c));
  },
};`;

test('--user: a node started as root runs its worker processes and the egress as that user', async (t) => {
  if (process.getuid() !== 0) return missingInput(t, 'the tests do not run as root', 'run them as root (CI does)');
  const n = await startNode({ workers: 1, extraArgs: ['--user', '65534:65534'] });
  try {
    const [w] = await readyWorkers(n, 1);
    assert.equal(status(w.pid).uid, '65534');
    const egress = children(n.proc.pid).find((pid) => comm(pid).startsWith('edgenode-egres'));
    assert.ok(egress, 'the egress process');
    assert.equal(status(egress).uid, '65534');
    await n.deployOk('counter', { 'index.js': COUNTER }, { bindings: { DB: { type: 'facet' } } });
    assert.equal((await n.ingress('counter', '/')).text, '1');
    assert.equal((await n.ingress('counter', '/')).text, '2');
    const info = (await n.control('GET', '/v1/node')).json;
    assert.equal(workerList(info)[0].sandbox.user, 'on');
  } finally {
    await n.stop({ clean: true });
  }
});

test('--user takes UID:GID only', async () => {
  const r = await runEdgenode(['--user', 'nobody', '--data', '/nonexistent']);
  assert.equal(r.code, 2);
  assert.match(r.stderr, /--user: must be UID:GID/);
});

// ---- what a compromised worker process tries, for real ----

const HI = `export default { fetch() { return new Response('hi'); } };`;

// The hook's outcome lines for `tenant`, by action.
function outcomes(n, tenant) {
  const out = {};
  for (const l of n.logs)
    if (l.json?.tenant === tenant && l.json.attempt && l.json.outcome) out[l.json.attempt] = l.json;
  return out;
}

async function violation(n, tenant) {
  return waitFor(async () => {
    const r = await n.control('GET', `/v1/events?tenant=${tenant}&kind=sandbox_violation`);
    return r.json.events[0];
  }, { timeout: 10000, what: `a sandbox_violation event naming ${tenant}` });
}

const tracerPid = (pid) => readFileSync(`/proc/${pid}/status`, 'utf8').match(/^TracerPid:\s*(\d+)/m)[1];

test('a jailed worker process that opens a TCP socket, execs or ptraces is killed by SIGSYS, and the event names the tenant that ran', async () => {
  let accepted = 0;
  const upstream = net.createServer((s) => { accepted++; s.destroy(); });
  await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
  const port = upstream.address().port;
  const n = await startNode({
    workers: 2, configFile: noCordonConfig(),
    env: { EDGENODE_TEST_JAIL_ATTEMPT: `try-tcp=tcp:${port} try-exec=execve try-ptrace=ptrace` },
  });
  n.allowCrashes = true; // the kills are the point
  try {
    await readyWorkers(n, 2);
    for (const name of ['try-tcp', 'try-exec', 'try-ptrace']) await n.deployOk(name, HI);
    for (const [name, action] of [['try-tcp', `tcp:${port}`], ['try-exec', 'execve'], ['try-ptrace', 'ptrace']]) {
      const from = n.logs.length;
      const r = await n.ingress(name, '/').catch((e) => e);
      const tried = await n.waitForLog((l) => l.json?.tenant === name && l.json.msg === `test hook: trying ${action}`,
        { from, timeout: 10000, what: `${name} trying ${action}` });
      if (action === 'execve' && r.status === 200) {
        // The sanitizer build refuses execve instead (its reports fork a symbolizer).
        const o = await waitFor(() => outcomes(n, name)[action], { what: 'the execve\'s outcome' });
        assert.equal(o.outcome, 'refused', o.msg);
        assert.equal(o.errno, 1, 'EPERM');
        continue;
      }
      assert.ok(r instanceof Error, `${name}: the client of the killed process gets no answer (${r.status})`);
      const ev = await violation(n, name);
      assert.equal(ev.details.signal, 31, 'SIGSYS');
      assert.equal(ev.details.running, name);
      assert.equal(`worker-${ev.details.worker}`, tried.json.process, 'the process that tried it');
      assert.equal(outcomes(n, name)[action], undefined, `${name}: nothing came back from ${action}`);
    }
    assert.equal(accepted, 0, 'no connection reached the loopback port');
    assert.equal(tracerPid(n.proc.pid), '0', 'the supervisor is not traced');
    // The processes that died were replaced and serve the others.
    await readyWorkers(n, 2);
    await n.deployOk('bystander', HI);
    assert.equal((await n.ingress('bystander', '/')).text, 'hi');
  } finally {
    await n.stop();
    upstream.close();
  }
});

test('a jailed worker process cannot open the control token, node.db or another process\'s /proc, signal or re-limit another process, or reach an abstract unix socket or one outside its view', async () => {
  const other = (await readyWorkers(node, 2))[0].pid; // a worker process of another node
  const attempts = (data) => [
    path.join(data, 'control.token'), path.join(data, 'node.db'), '/proc', '/proc/1/cmdline',
    `/proc/${other}/environ`, `/proc/${other}/status`,
  ].map((file) => `open:${file}`).concat(['signal', 'prlimit', 'renice', `prlimit:${other}`,
    `renice:${other}`, `unix:@edgenode-e2e-${process.pid}`, `unix:${outsideSocket}`]);
  const abstract = net.createServer((s) => s.destroy());
  await new Promise((r) => abstract.listen(`\0edgenode-e2e-${process.pid}`, r));
  // A named socket outside the data directory, as a container runtime's is.
  const outsideSocket = path.join(tempDir(), 'outside.sock');
  const named = net.createServer((s) => s.destroy());
  await new Promise((r) => named.listen(outsideSocket, r));
  // In the worker's view only the data directory and what it must read are
  // there; what is there but not allowed is refused by landlock.
  const notInView = (a) => a.startsWith('open:/proc/') || a === `unix:${outsideSocket}`;
  try {
    for (const jailed of [true, false]) {
      const data = tempDir();
      const list = attempts(data);
      const n = await startNode({
        workers: 1, dataDir: data, extraArgs: jailed ? [] : ['--no-sandbox'],
        env: { EDGENODE_TEST_JAIL_ATTEMPT: list.map((a) => `reader=${a}`).join(' ') },
      });
      try {
        await n.deployOk('reader', HI);
        assert.equal((await n.ingress('reader', '/')).text, 'hi', 'refusals do not end the process');
        const seen = await waitFor(() => {
          const o = outcomes(n, 'reader');
          return Object.keys(o).length === list.length ? o : null;
        }, { what: 'every attempt\'s outcome' });
        for (const a of list) {
          const o = seen[a];
          if (!jailed) {
            // The control: without the sandbox every one of them works.
            assert.equal(o.outcome, 'allowed', `${a} without the sandbox: ${o.msg}`);
            continue;
          }
          assert.equal(o.outcome, 'refused', `${a}: ${o.msg}`);
          if (notInView(a)) assert.equal(o.errno, 2, `${a}: ENOENT (not in the view)`);
          else if (a.startsWith('open:')) assert.equal(o.errno, 13, `${a}: EACCES (landlock)`);
          // seccomp: signals, limits and priorities of this process only.
          else if (!a.startsWith('unix:')) assert.equal(o.errno, 1, `${a}: EPERM (seccomp)`);
          // The abstract namespace belongs to the network namespace: the name is not there.
          else assert.equal(o.errno, 111, `${a}: ECONNREFUSED`);
        }
      } finally {
        await n.stop({ clean: true });
      }
    }
  } finally {
    abstract.close();
    named.close();
  }
});

test('a dedicated process killed by SIGSYS is a sandbox_violation of its tenant, and counts toward its suspension', async () => {
  const n = await startNode({
    workers: 1,
    configFile: writeFile(tempDir(), 'edgenode.json', JSON.stringify({
      cordon_rules: [], cordon_suspend_crashes: 2, cordon_suspend_window_s: 600 })),
    env: { EDGENODE_TEST_JAIL_ATTEMPT: 'breakout=ptrace' },
  });
  n.allowCrashes = true;
  try {
    await n.deployOk('breakout', HI);
    await n.deployOk('steady', HI);
    const cordon = await n.control('POST', '/v1/tenants/breakout/cordon', { body: { reason: 'test' } });
    assert.equal(cordon.status, 200, cordon.text);
    let t = await dedicatedReady(n, 'breakout');
    await n.ingress('breakout', '/').catch((e) => e);
    const ev = await violation(n, 'breakout');
    assert.equal(ev.details.pid, t.dedicated.pid);
    assert.equal(ev.details.signal, 31);
    assert.equal(ev.details.blamed, true);
    assert.equal(ev.details.crashes, 1);
    const crashes = await n.control('GET', '/v1/events?tenant=breakout&kind=crash');
    assert.equal(crashes.json.events.length, 0, 'a violation, not a crash');
    // The second one suspends it (cordon_suspend_crashes 2).
    t = await dedicatedReady(n, 'breakout', { notPid: t.dedicated.pid });
    await n.ingress('breakout', '/').catch((e) => e);
    await waitFor(async () => (await n.control('GET', '/v1/tenants/breakout')).json.state === 'suspended',
      { timeout: 10000, what: 'breakout suspended' });
    const r = await n.ingress('breakout', '/');
    assert.equal(r.status, 503);
    assert.match(r.json.error, /crashed 2 times/);
    assert.equal((await n.ingress('steady', '/')).text, 'hi');
  } finally {
    await n.stop();
  }
});

// A user namespace of its own lets the test take a layer away for real: its
// limit of network namespaces set to 0, unshare(CLONE_NEWNET) fails with
// ENOSPC there, as in a container that forbids them.
const NO_NETNS = ['unshare', '-Ur', 'sh', '-c', 'echo 0 > /proc/sys/user/max_net_namespaces && exec "$0" "$@"'];

function userNamespaces(t) {
  const r = spawnSync(NO_NETNS[0], [...NO_NETNS.slice(1), 'true'], { encoding: 'utf8' });
  if (r.status === 0) return true;
  missingInput(t, `cannot make a user namespace (${(r.stderr || r.error?.message || '').trim()})`,
    'run where unshare -Ur works (root, or unprivileged user namespaces allowed)');
  return false;
}

test('--require-sandbox refuses to start, with the layer and the reason, when the kernel refuses a layer', async (t) => {
  if (!userNamespaces(t)) return;
  const data = tempDir();
  const r = await runProcess(NO_NETNS[0], [...NO_NETNS.slice(1), EDGENODE, '--data', data, '--listen',
    '127.0.0.1:0', '--control', '127.0.0.1:0', '--workers', '1', '--require-sandbox'], { timeout: 20000 });
  assert.notEqual(r.code, 0, r.stderr);
  assert.equal(r.signal, null);
  assert.match(r.stderr, /--require-sandbox: the kernel refuses netns \(unshare: No space left on device\)/);
  assert.doesNotMatch(r.stderr, /"msg":"ready"/);
});

test('without --require-sandbox the node starts with the layer off, says so, and keeps the others', async (t) => {
  if (!userNamespaces(t)) return;
  // Without a network namespace of its own, the worker shares the abstract
  // unix namespace with this test: landlock (ABI 6 on) keeps it out.
  const name = `edgenode-e2e-scoped-${process.pid}`;
  const abstract = net.createServer((s) => s.destroy());
  await new Promise((r) => abstract.listen(`\0${name}`, r));
  t.after(() => abstract.close());
  const n = await startNode({
    workers: 1, wrapper: NO_NETNS, env: { EDGENODE_TEST_JAIL_ATTEMPT: `hello=unix:@${name}` },
  });
  try {
    const [w] = await readyWorkers(n, 1);
    assert.equal(w.sandbox.netns, 'off');
    for (const layer of ['seccomp', 'landlock', 'no_new_privs', 'ipcns', 'mntns'])
      assert.equal(w.sandbox[layer], 'on', layer);
    assert.equal(status(w.pid).seccomp, '2');
    assert.equal(netns(w.pid), netns(n.proc.pid));
    assert.ok(n.logs.some((l) => l.json?.level === 'warn' && l.json.msg === 'sandbox: netns is off: unshare: No space left on device'));
    const metrics = (await n.control('GET', '/metrics')).text;
    assert.match(metrics, /^edgenode_sandbox_layer\{layer="netns"\} 0$/m);
    await n.deployOk('hello', HI);
    assert.equal((await n.ingress('hello', '/')).text, 'hi');
    const o = await waitFor(() => outcomes(n, 'hello')[`unix:@${name}`], { what: 'the connect\'s outcome' });
    // Landlock ABI 6 (scoped abstract unix sockets) came with Linux 6.12.
    const [major, minor] = release().split('.').map(Number);
    if (major > 6 || (major === 6 && minor >= 12)) {
      assert.equal(o.outcome, 'refused', o.msg);
      assert.equal(o.errno, 1, 'EPERM: landlock scopes abstract unix sockets to the process');
    }
  } finally {
    await n.stop({ clean: true });
  }
});

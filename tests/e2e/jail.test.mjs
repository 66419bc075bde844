// The sandbox around worker processes and the egress, seen from outside as
// an operator would check it: each process's /proc status (a seccomp filter,
// no_new_privs), its network namespace (a worker's is its own, the egress
// keeps the supervisor's: it is the way out), and what GET /v1/node reports.
// The forbidden actions themselves are tried in tests/unit/jail_test.c.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, readlinkSync } from 'node:fs';
import { after, before, test } from 'node:test';
import { missingInput, runEdgenode, startNode, waitFor, workerList } from './lib/node.mjs';

let node;

function status(pid) {
  const text = readFileSync(`/proc/${pid}/status`, 'utf8');
  const field = (name) => text.match(new RegExp(`^${name}:\\s*(\\S+)`, 'm'))?.[1];
  return { seccomp: field('Seccomp'), noNewPrivs: field('NoNewPrivs'), capEff: field('CapEff'), uid: field('Uid') };
}

const netns = (pid) => readlinkSync(`/proc/${pid}/ns/net`);

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

test('every worker process runs under seccomp and no_new_privs, in a network namespace of its own', async () => {
  const workers = await readyWorkers(node, 2);
  const supervisorNet = netns(node.proc.pid);
  for (const w of workers) {
    const s = status(w.pid);
    assert.equal(s.seccomp, '2', `worker ${w.pid}: Seccomp`);
    assert.equal(s.noNewPrivs, '1', `worker ${w.pid}: NoNewPrivs`);
    assert.equal(s.capEff, '0000000000000000', `worker ${w.pid}: no capabilities left`);
    assert.notEqual(netns(w.pid), supervisorNet, `worker ${w.pid}: network namespace`);
  }
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
    for (const layer of ['seccomp', 'no_new_privs', 'landlock', 'netns', 'caps'])
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

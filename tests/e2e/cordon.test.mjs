// Cordoning end to end: the monitor moves a misbehaving tenant into a worker
// process of its own, operators cordon and uncordon by hand, the state
// survives a restart, a dedicated process that keeps crashing gets its tenant
// suspended, a shared process's crash is blamed on the tenant whose code was
// running, and a facet under write load moves without losing or repeating an
// acknowledged write. Real binaries, sockets and SQLite files throughout.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';

import {
  EDGECTL, SOURCE_DIR, dedicatedReady, parseOne, rawRequest, runEdgenode, runProcess, sleep,
  startNode, tempDir, waitFor, workerList, writeFile,
} from './lib/node.mjs';

const COUNTER = readFileSync(path.join(SOURCE_DIR, 'tests/e2e/fixtures/facets/counter.js'), 'utf8');

// /spin never returns (the CPU limit ends it); anything else logs and answers.
const NOISY = `export default {
  fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === '/spin') { while (true) {} }
    if (url.pathname === '/busy') {
      console.log('busy: spinning');
      const end = Date.now() + Number(url.searchParams.get('ms') ?? 3000);
      while (Date.now() < end) {}
      return new Response('done');
    }
    console.log('served ' + url.pathname);
    return new Response('ok ' + url.pathname);
  },
};`;

const STEADY = `export default { fetch() { return new Response('steady'); } };`;

function config(dir, obj) {
  return writeFile(dir, 'edgenode.json', JSON.stringify(obj));
}

async function tenant(node, name) {
  const r = await node.control('GET', `/v1/tenants/${name}`);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// The process that logged the tenant's most recent console line with `text`.
async function servedBy(node, name, urlPath) {
  const r = await node.ingress(name, urlPath);
  assert.equal(r.status, 200, r.text);
  const line = await node.waitForLog((l) => l.json?.tenant === name && l.json.msg === `served ${urlPath}`,
    { timeout: 5000, what: `console line of ${urlPath}` });
  return line.json.process;
}

async function edgectl(node, ...args) {
  return runProcess(EDGECTL, ['--node', `http://127.0.0.1:${node.controlPort}`, '--token-file',
    node.tokenFile, ...args]);
}

test('a rule fires after 3 CPU-limit hits: the tenant moves to a dedicated process', async () => {
  const dir = tempDir();
  const node = await startNode({
    workers: 2, configFile: config(dir, { cordon_rules: ['cpu_limit_hits >= 3 in 60s'] }),
  });
  try {
    await node.deployOk('noisy', NOISY, { json: true, limits: { cpu_ms: 20 } });
    await node.deployOk('steady', STEADY);
    assert.match(await servedBy(node, 'noisy', '/before'), /^worker-\d+$/);
    for (let i = 0; i < 3; i++) {
      const r = await node.ingress('noisy', '/spin');
      assert.equal(r.status, 503, r.text);
    }
    const t = await dedicatedReady(node, 'noisy');
    assert.equal(t.rule, 'cpu_limit_hits >= 3 in 60s');
    assert.equal(t.by, 'monitor');
    assert.match(t.reason, /cpu_limit_hits >= 3 in 60s/);
    assert.ok(!Number.isNaN(Date.parse(t.since)));
    const shared = await node.workerPids();
    assert.ok(!shared.includes(t.dedicated.pid), `dedicated pid ${t.dedicated.pid} is a shared one`);
    // It runs on the CPU time the shared processes leave (SCHED_IDLE is 5).
    await waitFor(() => /^policy\s*:\s*5$/m.test(readFileSync(`/proc/${t.dedicated.pid}/sched`, 'utf8')),
      { timeout: 5000, what: 'SCHED_IDLE on the dedicated process' });

    // Its code now runs only in its own process, whichever shared process
    // accepted the connection; the client sees the same answers.
    for (let i = 0; i < 6; i++) assert.equal(await servedBy(node, 'noisy', `/after-${i}`), 'cordon-noisy');
    const r = await node.ingress('noisy', '/spin');
    assert.equal(r.status, 503);
    assert.equal(r.json.error, 'exceeded CPU limit');
    // Other tenants never noticed.
    for (let i = 0; i < 5; i++) assert.equal((await node.ingress('steady', '/')).text, 'steady');
    assert.equal((await tenant(node, 'steady')).state, 'active');

    const ev = await node.control('GET', '/v1/events?kind=cordon');
    assert.equal(ev.json.events[0].tenant, 'noisy');
    assert.equal(ev.json.events[0].details.rule, 'cpu_limit_hits >= 3 in 60s');
    const m = await node.control('GET', '/metrics');
    assert.match(m.text, /^edgenode_tenant_cordoned\{tenant="noisy"\} 1$/m);
    assert.match(m.text, /^edgenode_tenant_cordoned\{tenant="steady"\} 0$/m);
    const list = await node.control('GET', '/v1/tenants');
    assert.equal(list.json.tenants.find((x) => x.name === 'noisy').state, 'cordoned');
    await waitFor(async () => {
      const x = await tenant(node, 'noisy');
      return x.loaded_in.length === 1 && x.loaded_in[0] === x.dedicated.worker;
    }, { timeout: 10000, what: 'noisy loaded in its dedicated process only' });
  } finally {
    await node.stop();
  }
});

test('SIGHUP applies new cordon rules', async () => {
  const dir = tempDir();
  const file = config(dir, { cordon_rules: ['cpu_limit_hits >= 100 in 60s'] });
  const node = await startNode({ workers: 1, configFile: file });
  try {
    await node.deployOk('noisy', NOISY, { json: true, limits: { cpu_ms: 20 } });
    assert.equal((await node.ingress('noisy', '/spin')).status, 503);
    assert.equal((await tenant(node, 'noisy')).state, 'active', 'one hit is far from 100');
    config(dir, { cordon_rules: ['cpu_limit_hits >= 1 in 60s'] });
    const from = node.logs.length;
    node.proc.kill('SIGHUP');
    const line = await node.waitForLog((l) => l.json?.msg === 'configuration reloaded', { from });
    assert.equal(line.json.changed.cordon_rules, true);
    assert.equal((await node.ingress('noisy', '/spin')).status, 503);
    const t = await dedicatedReady(node, 'noisy');
    assert.equal(t.rule, 'cpu_limit_hits >= 1 in 60s');
  } finally {
    await node.stop();
  }
});

test('deleting a cordoned worker ends its cordon and its dedicated process', async () => {
  const node = await startNode({ workers: 1 });
  try {
    await node.deployOk('gone', NOISY, { json: true });
    const r = await node.control('POST', '/v1/tenants/gone/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    await dedicatedReady(node, 'gone');
    assert.equal((await node.control('DELETE', '/v1/workers/gone')).status, 200);
    await node.waitForLog((l) => l.json?.process === 'cordon-gone' && l.json.msg === 'exiting',
      { timeout: 40000, what: 'the dedicated process exiting' });
    const ev = await node.control('GET', '/v1/events?tenant=gone&kind=uncordon');
    assert.equal(ev.json.events[0].details.by, 'delete');
    // Deployed again, it runs in the shared processes.
    await node.deployOk('gone', NOISY, { json: true });
    assert.match(await servedBy(node, 'gone', '/back'), /^worker-\d+$/);
  } finally {
    await node.stop();
  }
});

// A redeploy reaches the dedicated process too: an operator's fix or a new
// release must not wait for the uncordon (it did: the old code kept serving).
test('a cordoned tenant redeployed serves its new code and limits from its dedicated process', async () => {
  const node = await startNode({ workers: 1 });
  try {
    const version = (v, cpu) => `export default { fetch() {
      const end = Date.now() + ${cpu}; while (Date.now() < end) {}
      return new Response('version ${v}');
    } };`;
    // CPU to spare for the dedicated process's cold start (sanitizer builds).
    await node.deployOk('moving', version('A', 0), { json: true, limits: { cpu_ms: 400 } });
    const r = await node.control('POST', '/v1/tenants/moving/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    await dedicatedReady(node, 'moving');
    assert.equal((await node.ingress('moving', '/')).text, 'version A');
    // Version B spins 600 ms: it needs the new limit as well as the new code.
    await node.deployOk('moving', version('B', 600), { json: true, limits: { cpu_ms: 3000 } });
    let last = '';
    await waitFor(async () => {
      const a = await node.ingress('moving', '/');
      last = `${a.status} ${a.text}`;
      return a.status === 200 && a.text === 'version B' ? a : null;
    }, { timeout: 10000, what: 'version B from the dedicated process' }).catch((err) => {
      throw new Error(`${err.message}; last answer: ${last}`);
    });
    assert.equal((await tenant(node, 'moving')).state, 'cordoned');
  } finally {
    await node.stop();
  }
});

// A dedicated process started during a drain would not be drained with the
// others (it was killed at the end of the grace period): refused, as deploys are.
test('cordoning during a drain is refused with 503, and starts no process', async () => {
  const node = await startNode({ workers: 1 });
  try {
    await node.deployOk('late', NOISY, { json: true });
    assert.equal((await node.control('POST', '/v1/node/drain')).status, 202);
    const r = await node.control('POST', '/v1/tenants/late/cordon', { body: { reason: 'too late' } });
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.error, 'the node is shutting down');
    const t = await tenant(node, 'late');
    assert.equal(t.state, 'active', JSON.stringify(t));
    assert.equal(node.logsMatching((l) => l.json?.process === 'cordon-late').length, 0);
  } finally {
    await node.stop();
  }
});

test('edgectl cordon and uncordon; the cordon survives a restart', async () => {
  const dataDir = tempDir();
  let node = await startNode({ workers: 2, dataDir });
  try {
    await node.deployOk('quiet', NOISY, { json: true });
    let r = await edgectl(node, 'cordon', 'quiet', '--reason', 'noisy neighbour');
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /quiet: cordoned \(noisy neighbour\)/);
    let t = await dedicatedReady(node, 'quiet');
    assert.equal(t.reason, 'noisy neighbour');
    assert.equal(t.by, 'operator');
    assert.equal(t.rule, null);
    assert.equal(await servedBy(node, 'quiet', '/a'), 'cordon-quiet');
    r = await edgectl(node, 'tenants');
    assert.match(r.stdout, /^quiet\s+cordoned\b/m);
    await node.stop({ clean: true });

    node = await startNode({ workers: 2, dataDir });
    t = await dedicatedReady(node, 'quiet');
    assert.equal(t.reason, 'noisy neighbour');
    assert.equal(await servedBy(node, 'quiet', '/b'), 'cordon-quiet');

    r = await edgectl(node, '--json', 'uncordon', 'quiet');
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), { name: 'quiet', state: 'active', was: 'cordoned' });
    assert.equal((await tenant(node, 'quiet')).state, 'active');
    assert.match(await servedBy(node, 'quiet', '/c'), /^worker-\d+$/);
    // The dedicated process drains away once no shared process forwards to it.
    await node.waitForLog((l) => l.json?.process === 'cordon-quiet' && l.json.msg === 'exiting',
      { timeout: 20000, what: 'the dedicated process exiting' });
    const ev = await node.control('GET', '/v1/events?tenant=quiet');
    const kinds = ev.json.events.map((e) => e.kind);
    assert.ok(kinds.indexOf('uncordon') < kinds.indexOf('cordon'), kinds.join(','));
    r = await edgectl(node, 'uncordon', 'quiet');
    assert.equal(r.code, 1);
    assert.match(r.stderr, /not cordoned \(HTTP 409\)/);
  } finally {
    await node.stop();
  }
});

// Echoes the request body back as a stream, with its SHA-256 in a header.
const ECHO = `export default {
  async fetch(request) {
    const body = new Uint8Array(await request.arrayBuffer());
    const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', body));
    const hex = [...digest].map((b) => b.toString(16).padStart(2, '0')).join('');
    let sent = 0;
    const stream = new ReadableStream({
      pull(c) {
        if (sent >= body.length) { c.close(); return; }
        c.enqueue(body.subarray(sent, sent + 65536));
        sent += 65536;
      },
    });
    return new Response(stream, { headers: { 'x-sha256': hex } });
  },
};`;

// A cordoned tenant's requests pass through a handoff, which frames them
// itself: the tenant must still see the headers the client sent, as it did
// in a shared process (it saw the handoff's Content-Length and Connection).
test('a cordoned tenant sees the request headers the client sent', async () => {
  const node = await startNode({ workers: 2 });
  try {
    await node.deployOk('headers', `export default { async fetch(request) {
      await request.arrayBuffer();
      return Response.json([...request.headers].filter(([k]) => k !== 'host'));
    } };`, { json: true, limits: { cpu_ms: 1000 } }); // a dedicated process's first request: a cold start
    const chunked = [Buffer.from('POST / HTTP/1.1\r\nHost: headers.localhost\r\nX-Mine: 1\r\n' +
      'Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n')];
    const seen = async () => {
      const get = await node.ingress('headers', '/', { headers: { 'x-mine': '1' } });
      const raw = await rawRequest(node.listenPort, chunked, { timeout: 30000 });
      const post = parseOne(raw.data, { eof: true });
      return { get: get.json, post: JSON.parse(post.response.body.toString()) };
    };
    const shared = await seen();
    assert.deepEqual(shared.post, [['connection', 'close'], ['transfer-encoding', 'chunked'], ['x-mine', '1']]);
    const r = await node.control('POST', '/v1/tenants/headers/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    await dedicatedReady(node, 'headers');
    assert.deepEqual(await seen(), shared);
  } finally {
    await node.stop();
  }
});

test('large and chunked bodies reach a cordoned tenant whole, both ways', async () => {
  const node = await startNode({ workers: 2 });
  try {
    await node.deployOk('echo', ECHO, { json: true, limits: { cpu_ms: 5000 } });
    const r = await edgectl(node, 'cordon', 'echo', '--reason', 'bodies');
    assert.equal(r.code, 0, r.stderr);
    await dedicatedReady(node, 'echo');
    const body = Buffer.alloc(1536 * 1024); // over 1 MiB: streamed to the shared process
    for (let i = 0; i < body.length; i++) body[i] = (i * 7) & 255;
    const sha = createHash('sha256').update(body).digest('hex');
    // Several times: the shared process that takes the connection varies.
    for (let i = 0; i < 3; i++) {
      // Generous: the dedicated process runs at a lower priority, and the
      // sanitizer build on a busy machine is slow.
      const res = await node.ingress('echo', '/', { method: 'POST', body, timeout: 60000 });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.headers['x-sha256'], sha);
      assert.ok(res.body.equals(body));
      const pieces = [body.subarray(0, 100000), body.subarray(100000, 900000), body.subarray(900000)];
      const chunked = [Buffer.from('POST / HTTP/1.1\r\nHost: echo.localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n'),
        ...pieces.map((p) => Buffer.concat([Buffer.from(p.length.toString(16) + '\r\n'), p, Buffer.from('\r\n')])),
        Buffer.from('0\r\n\r\n')];
      const raw = await rawRequest(node.listenPort, chunked, { timeout: 60000 });
      const parsed = parseOne(raw.data, { eof: true });
      assert.equal(parsed?.response.status, 200);
      assert.equal(parsed.response.headers['x-sha256'], sha);
    }
  } finally {
    await node.stop();
  }
});

// SIGABRT stands for a fault raised inside the process (a V8 CHECK, abort()).
test('a dedicated process is restarted; crashing 3 times suspends the tenant', async () => {
  const dir = tempDir();
  const node = await startNode({
    workers: 2, configFile: config(dir, { cordon_suspend_crashes: 3, cordon_suspend_window_s: 600 }),
  });
  node.allowCrashes = true;
  try {
    await node.deployOk('fragile', NOISY, { json: true });
    await node.deployOk('steady', STEADY);
    let r = await node.control('POST', '/v1/tenants/fragile/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    let t = await dedicatedReady(node, 'fragile');
    process.kill(t.dedicated.pid, 'SIGABRT');
    t = await dedicatedReady(node, 'fragile', { notPid: t.dedicated.pid });
    assert.equal(t.dedicated.restarts, 1);
    assert.equal(await servedBy(node, 'fragile', '/again'), 'cordon-fragile');
    const ev = await node.control('GET', '/v1/events?tenant=fragile&kind=crash');
    assert.equal(ev.json.events.length, 1);
    assert.equal(ev.json.events[0].details.blamed, true);
    assert.equal(ev.json.events[0].details.crashes, 1);

    process.kill(t.dedicated.pid, 'SIGABRT');
    t = await dedicatedReady(node, 'fragile', { notPid: t.dedicated.pid });
    process.kill(t.dedicated.pid, 'SIGABRT');
    t = await waitFor(async () => {
      const x = await tenant(node, 'fragile');
      return x.state === 'suspended' ? x : null;
    }, { timeout: 10000, what: 'fragile suspended' });
    assert.equal(t.dedicated, undefined);
    const before = await tenant(node, 'fragile');
    r = await node.ingress('fragile', '/x');
    assert.equal(r.status, 503);
    assert.match(r.json.error, /^tenant suspended: .*crashed 3 times.*uncordon/);
    assert.equal(r.json.state, 'suspended');
    // Answered by a shared process, and counted there: a suspended tenant
    // must not look idle and error-free.
    await waitFor(async () => {
      const x = await tenant(node, 'fragile');
      return x.requests === before.requests + 1 && x.errors === before.errors + 1 ? x : null;
    }, { timeout: 5000, what: 'the 503 counted as a request and an error' });
    assert.equal((await node.ingress('steady', '/')).text, 'steady');
    const m = await node.control('GET', '/metrics');
    assert.match(m.text, /^edgenode_tenant_suspended\{tenant="fragile"\} 1$/m);
    const sus = await node.control('GET', '/v1/events?tenant=fragile&kind=suspend');
    assert.equal(sus.json.events.length, 1);
    assert.equal(sus.json.events[0].details.cause, 'crashes');
    assert.equal(t.cause, 'crashes');
    assert.equal(r.headers['retry-after'], undefined, 'no end to tell of');

    r = await node.control('POST', '/v1/tenants/fragile/uncordon');
    assert.deepEqual(r.json, { name: 'fragile', state: 'active', was: 'suspended' });
    assert.match(await servedBy(node, 'fragile', '/back'), /^worker-\d+$/);
  } finally {
    await node.stop();
  }
});

// Attack class 6 for dedicated processes: a SIGKILL from outside (an
// operator, the kernel's OOM killer) is no evidence against the tenant.
test('a dedicated process killed from outside is restarted and not counted: no suspension', async () => {
  const node = await startNode({
    workers: 1, configFile: config(tempDir(), { cordon_rules: [], cordon_suspend_crashes: 2 }),
  });
  node.allowCrashes = true;
  try {
    await node.deployOk('victim', NOISY, { json: true });
    const r = await node.control('POST', '/v1/tenants/victim/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    let t = await dedicatedReady(node, 'victim');
    const killed = [];
    for (let i = 0; i < 3; i++) {
      killed.push(t.dedicated.pid);
      process.kill(t.dedicated.pid, 'SIGKILL');
      t = await dedicatedReady(node, 'victim', { notPid: t.dedicated.pid });
    }
    assert.equal(t.state, 'cordoned');
    assert.equal(t.dedicated.restarts, 3);
    assert.equal(t.crashes, 0);
    assert.equal(await servedBy(node, 'victim', '/still'), 'cordon-victim');
    const ev = (await node.control('GET', '/v1/events?tenant=victim&kind=crash')).json.events;
    assert.deepEqual(ev.map((e) => e.details.pid).sort(), killed.sort());
    for (const e of ev) {
      assert.equal(e.details.signal, 9);
      assert.equal(e.details.blamed, false);
      assert.equal(e.details.crashes, 0);
    }
    const sus = await node.control('GET', '/v1/events?tenant=victim&kind=suspend');
    assert.equal(sus.json.events.length, 0);
  } finally {
    await node.stop();
  }
});

// Attack class 9 for dedicated processes: a stopped one is noticed by its
// heartbeat and replaced, as a shared one is (lifecycle.test.mjs).
test('a stopped dedicated process (SIGSTOP) is noticed within seconds and replaced, blaming nobody', async () => {
  const node = await startNode({
    workers: 1, configFile: config(tempDir(), { cordon_rules: [], cordon_suspend_crashes: 1 }),
  });
  node.allowCrashes = true; // the kill that replaces it is logged as an exit
  try {
    await node.deployOk('frozen', NOISY, { json: true });
    const r = await node.control('POST', '/v1/tenants/frozen/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    const t = await dedicatedReady(node, 'frozen');
    const victim = t.dedicated.pid;
    const from = node.logs.length;
    process.kill(victim, 'SIGSTOP');
    // A request that arrives meanwhile is answered by the replacement.
    const pending = node.ingress('frozen', '/waited', { timeout: 30000 });
    const line = await node.waitForLog((l) => /stopped answering/.test(l.json?.msg ?? '') &&
      l.json.pid === victim, { from, timeout: 10000, what: 'the supervisor noticing the stop' });
    assert.equal(line.json.tenant, 'frozen');
    const fresh = await dedicatedReady(node, 'frozen', { notPid: victim });
    assert.equal(fresh.state, 'cordoned', 'not suspended: a stop is no crash of its own');
    const answered = await pending;
    assert.equal(answered.status, 200, answered.text);
    assert.equal(answered.text, 'ok /waited');
    const ev = (await node.control('GET', '/v1/events?tenant=frozen&kind=crash')).json.events;
    const crash = ev.find((e) => e.details.pid === victim);
    assert.ok(crash, 'a crash event for the replaced process');
    assert.equal(crash.details.reason, 'unresponsive');
    assert.equal(crash.details.blamed, false);
  } finally {
    await node.stop();
  }
});

// A crash is blamed on the running tenant only when it is a fault of the
// process's own (here SIGABRT, as a V8 CHECK or abort() would end it): a
// SIGKILL comes from outside (the OOM killer, an operator) and blames nobody.
test('a shared process that crashes is blamed on the tenant whose code was running', async () => {
  const node = await startNode({ workers: 2 });
  node.allowCrashes = true;
  try {
    await node.deployOk('crasher', NOISY, { json: true, limits: { cpu_ms: 30000 } });
    await node.deployOk('steady', STEADY);
    const from = node.logs.length;
    const pending = node.ingress('crasher', '/busy?ms=20000').catch((e) => e);
    const line = await node.waitForLog((l) => l.json?.tenant === 'crasher' && l.json.msg === 'busy: spinning',
      { from, timeout: 10000, what: 'the busy request running' });
    const id = Number(/^worker-(\d+)$/.exec(line.json.process)[1]);
    const victim = workerList(await node.nodeInfo()).find((w) => w.id === id);
    process.kill(victim.pid, 'SIGABRT');
    await pending; // the client of the killed process gets an error; that is all it gets
    const t = await dedicatedReady(node, 'crasher');
    assert.equal(t.rule, 'crashes >= 1 in 600s');
    const ev = await node.control('GET', '/v1/events?kind=crash');
    const crash = ev.json.events.find((e) => e.details.pid === victim.pid);
    assert.equal(crash.tenant, 'crasher');
    assert.equal(crash.details.running, 'crasher');
    assert.equal(await servedBy(node, 'crasher', '/fine'), 'cordon-crasher');
    assert.equal((await node.ingress('steady', '/')).text, 'steady');
    assert.equal((await tenant(node, 'steady')).state, 'active');
  } finally {
    await node.stop();
  }
});

test('a SIGKILL from outside while a tenant runs blames nobody: no cordon, the event names who was running', async () => {
  const node = await startNode({ workers: 2 });
  node.allowCrashes = true;
  try {
    await node.deployOk('bystander', NOISY, { json: true, limits: { cpu_ms: 30000 } });
    const from = node.logs.length;
    const pending = node.ingress('bystander', '/busy?ms=20000').catch((e) => e);
    const line = await node.waitForLog((l) => l.json?.tenant === 'bystander' && l.json.msg === 'busy: spinning',
      { from, timeout: 10000, what: 'the busy request running' });
    const id = Number(/^worker-(\d+)$/.exec(line.json.process)[1]);
    const victim = workerList(await node.nodeInfo()).find((w) => w.id === id);
    process.kill(victim.pid, 'SIGKILL');
    await pending;
    let crash;
    await waitFor(async () => {
      const ev = await node.control('GET', '/v1/events?kind=crash');
      crash = ev.json.events.find((e) => e.details.pid === victim.pid);
      return crash;
    }, { timeout: 10000, what: 'the crash event' });
    assert.equal(crash.tenant, undefined, JSON.stringify(crash));
    assert.equal(crash.details.running, 'bystander');
    assert.equal(crash.details.signal, 9);
    await sleep(1500); // the monitor would have cordoned by now
    assert.equal((await tenant(node, 'bystander')).state, 'active');
    const cordons = await node.control('GET', '/v1/events?kind=cordon');
    assert.equal(cordons.json.events.length, 0);
  } finally {
    await node.stop();
  }
});

// A parent whose load()ed child spins: the child's code is the parent tenant's.
const PARENT = `export default {
  async fetch(request, env) {
    const child = env.LOADER.load({
      compatibilityDate: '2025-01-01', mainModule: 'c.js', globalOutbound: null,
      modules: { 'c.js': "export default { fetch() { console.log('child: spinning'); " +
        "const end = Date.now() + 20000; while (Date.now() < end) {} return new Response('late'); } };" },
      limits: { cpuMs: 30000 },
    });
    return child.getEntrypoint().fetch(request);
  },
};`;

test('a crash inside a dynamic worker is blamed on the tenant that loaded it', async () => {
  const node = await startNode({ workers: 1 });
  node.allowCrashes = true;
  try {
    await node.deployOk('parent', { 'index.js': PARENT },
      { bindings: { LOADER: { type: 'loader' } }, limits: { cpu_ms: 30000 } });
    const from = node.logs.length;
    const pending = node.ingress('parent', '/').catch((e) => e);
    await node.waitForLog((l) => l.json?.msg === 'child: spinning', { from, timeout: 10000, what: 'the child running' });
    const victim = workerList(await node.nodeInfo())[0];
    process.kill(victim.pid, 'SIGABRT');
    await pending;
    await waitFor(async () => {
      const ev = await node.control('GET', '/v1/events?kind=crash');
      return ev.json.events.find((e) => e.details.pid === victim.pid);
    }, { timeout: 10000, what: 'the crash event' });
    const ev = await node.control('GET', '/v1/events?kind=crash');
    const crash = ev.json.events.find((e) => e.details.pid === victim.pid);
    assert.equal(crash.tenant, 'parent');
    assert.equal(crash.details.running, 'parent');
  } finally {
    await node.stop();
  }
});

test('facet under write load: every acknowledged write is kept, none twice', async () => {
  const node = await startNode({ workers: 2 });
  try {
    await node.deployOk('ledger', { 'index.js': COUNTER }, { bindings: { DB: { type: 'facet' } } });
    let next = 0;
    let stop = false;
    const acked = [];
    const failed = [];
    async function hammer() {
      while (!stop) {
        const n = ++next;
        try {
          const r = await node.ingress('ledger', `/write?n=${n}`, { method: 'POST' });
          if (r.status >= 200 && r.status < 300) acked.push(n);
          else failed.push(`${n}: ${r.status} ${r.text}`);
        } catch (err) {
          failed.push(`${n}: ${err.message}`);
        }
      }
    }
    const clients = Array.from({ length: 8 }, hammer);
    const moves = (async () => {
      const until = async (k) => waitFor(() => acked.length >= k, { timeout: 30000, what: `${k} writes` });
      await until(50);
      let r = await node.control('POST', '/v1/tenants/ledger/cordon', { body: { reason: 'load test' } });
      assert.equal(r.status, 200, r.text);
      await dedicatedReady(node, 'ledger');
      await until(acked.length + 100);
      r = await node.control('POST', '/v1/tenants/ledger/uncordon');
      assert.equal(r.status, 200, r.text);
      await until(acked.length + 100);
      r = await node.control('POST', '/v1/tenants/ledger/cordon', { body: { reason: 'again' } });
      assert.equal(r.status, 200, r.text);
      await until(acked.length + 100);
    })();
    try {
      await moves;
    } finally {
      stop = true;
      await Promise.all(clients);
    }
    assert.deepEqual(failed, [], 'requests lost during the moves');
    const count = await node.ingress('ledger', '/count');
    assert.equal(count.status, 200, count.text);
    assert.equal(count.json.count, acked.length);
    const ids = await node.ingress('ledger', '/ids');
    assert.deepEqual(ids.json, [...acked].sort((a, b) => a - b));
  } finally {
    await node.stop();
  }
});

test('bad inputs get clear errors and change nothing', async () => {
  const node = await startNode({ workers: 1 });
  try {
    await node.deployOk('known', STEADY);
    let r = await node.control('POST', '/v1/tenants/nobody/cordon', { body: { reason: 'x' } });
    assert.equal(r.status, 404);
    assert.deepEqual(r.json, { error: 'unknown tenant', name: 'nobody' });
    r = await node.control('POST', '/v1/tenants/nobody/uncordon');
    assert.equal(r.status, 404);
    r = await node.control('POST', '/v1/tenants/known/cordon', { body: { reason: 'x' }, token: null });
    assert.equal(r.status, 401);
    r = await node.control('POST', '/v1/tenants/known/cordon', { body: '{"reason": ', headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400);
    assert.match(r.json.error, /JSON object/);
    r = await node.control('POST', '/v1/tenants/known/cordon', { body: { reason: 42 } });
    assert.equal(r.status, 400);
    assert.equal(r.json.key, 'reason');
    // strict like a deploy body: unknown and repeated keys are refused
    r = await node.control('POST', '/v1/tenants/known/cordon', { body: { reason: 'ok', extra: 1 } });
    assert.equal(r.status, 400, r.text);
    assert.deepEqual(r.json, { error: 'unknown key "extra" (expected reason)', key: 'extra' });
    r = await node.control('POST', '/v1/tenants/known/cordon', { body: '{"reason":"a","reason":"b"}', headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.detail, /duplicate/);
    r = await node.control('GET', '/v1/tenants/known/cordon');
    assert.equal(r.status, 405);
    assert.equal(r.headers.allow, 'POST');
    r = await node.control('POST', '/v1/tenants/Bad_Name/cordon');
    assert.equal(r.status, 400);
    r = await node.control('POST', '/v1/tenants/known/uncordon');
    assert.equal(r.status, 409);
    assert.equal((await tenant(node, 'known')).state, 'active');
    const ev = await node.control('GET', '/v1/events?kind=cordon');
    assert.deepEqual(ev.json.events, []);

    r = await node.control('POST', '/v1/tenants/known/cordon');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.reason, 'cordoned by an operator');
    r = await node.control('POST', '/v1/tenants/known/cordon');
    assert.equal(r.status, 409);
    assert.equal(r.json.state, 'cordoned');
  } finally {
    await node.stop();
  }

  const dir = tempDir();
  let res = await runEdgenode(['--config', config(dir, { cordon_rules: ['cpu_limit_hits >= 3 in 60s', 'cpu > 1'] }),
    '--data', dir]);
  assert.equal(res.code, 2, res.stderr);
  assert.match(res.stderr, /"cordon_rules": rule 2 \("cpu > 1"\): unknown metric/);
  res = await runEdgenode(['--config', config(dir, { cordon_rules: 'crashes >= 1' }), '--data', dir]);
  assert.equal(res.code, 2);
  assert.match(res.stderr, /"cordon_rules": must be an array/);
  res = await runEdgenode(['--cordon-rules', 'crashes >= 1 in forever', '--data', dir]);
  assert.equal(res.code, 2);
  assert.match(res.stderr, /--cordon-rules: rule 1 .*window/);
  res = await runEdgenode(['--config', config(dir, { cordon_nice: 40 }), '--data', dir]);
  assert.equal(res.code, 2);
  assert.match(res.stderr, /"cordon_nice": must be an integer between 0 and 19/);
});

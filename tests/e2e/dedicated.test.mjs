// Dedicated processes are capped: past max_dedicated, the tenant that used the
// most CPU is suspended (503 with Retry-After) until its suspension expires or
// an operator uncordons it; a dedicated process idle for dedicated_idle_s
// exits, and its tenant's next request starts it again. Real binaries,
// sockets and /proc throughout.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { test } from 'node:test';

import { dedicatedReady, startNode, tempDir, waitFor, writeFile } from './lib/node.mjs';

// /spin never returns (the CPU limit ends it); anything else logs and answers.
const SPINNER = `export default {
  fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === '/spin') { while (true) {} }
    console.log('served ' + url.pathname);
    return new Response('ok ' + url.pathname);
  },
};`;

const STEADY = `export default { fetch() { return new Response('steady'); } };`;

function config(obj) {
  return writeFile(tempDir(), 'edgenode.json', JSON.stringify(obj));
}

async function tenant(node, name) {
  const r = await node.control('GET', `/v1/tenants/${name}`);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

async function state(node, name, want, what = `${name} ${want}`) {
  return waitFor(async () => {
    const t = await tenant(node, name);
    return t.state === want ? t : null;
  }, { timeout: 40000, what });
}

// The supervisor's children that run one tenant (edgenode-worker --tenant NAME), from /proc.
function dedicatedPids(node) {
  const pids = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== node.proc.pid) continue;
      const argv = readFileSync(`/proc/${entry}/cmdline`, 'utf8').split('\0');
      if (argv.includes('--tenant')) pids.push(Number(entry));
    } catch { /* gone meanwhile */ }
  }
  return pids.sort((a, b) => a - b);
}

async function spinUntilCordoned(node, name) {
  for (let i = 0; i < 3; i++) {
    const r = await node.ingress(name, '/spin');
    assert.equal(r.status, 503, r.text);
  }
  return waitFor(async () => {
    const t = await tenant(node, name);
    return t.state !== 'active' ? t : null;
  }, { timeout: 10000, what: `${name} cordoned` });
}

test('past max_dedicated the tenant with the most CPU is suspended; only the cap runs', async () => {
  const node = await startNode({
    workers: 2,
    configFile: config({ cordon_rules: ['cpu_limit_hits >= 3 in 60s'], max_dedicated: 2,
      dedicated_idle_s: 3600, dedicated_suspend_s: 600 }),
  });
  try {
    // hog burns 15 times the CPU of the others before each is cordoned.
    await node.deployOk('hog', SPINNER, { json: true, limits: { cpu_ms: 300 } });
    await node.deployOk('spin-a', SPINNER, { json: true, limits: { cpu_ms: 20 } });
    await node.deployOk('spin-b', SPINNER, { json: true, limits: { cpu_ms: 20 } });
    await node.deployOk('steady', STEADY);
    const info0 = await node.nodeInfo();
    assert.deepEqual(info0.dedicated, { running: 0, max: 2, suspensions: 0, idle_exits: 0 });

    await spinUntilCordoned(node, 'hog');
    const hog = await dedicatedReady(node, 'hog');
    await spinUntilCordoned(node, 'spin-a');
    await dedicatedReady(node, 'spin-a');
    // The third is over the cap: hog, not the newcomer, goes.
    await spinUntilCordoned(node, 'spin-b');
    const suspended = await state(node, 'hog', 'suspended');
    assert.equal(suspended.cause, 'max_dedicated');
    assert.match(suspended.reason, /max_dedicated \(2\)/);
    assert.ok(Date.parse(suspended.until) > Date.now(), suspended.until);
    await dedicatedReady(node, 'spin-b');
    assert.equal((await tenant(node, 'spin-a')).state, 'cordoned');

    // hog's process is gone; two remain, as /v1/node and /proc both say.
    await waitFor(() => !existsSync(`/proc/${hog.dedicated.pid}`) || null,
      { timeout: 30000, what: 'hog\'s dedicated process gone' });
    await waitFor(async () => (await tenant(node, 'hog')).dedicated === undefined || null,
      { timeout: 10000, what: 'hog without a dedicated process' });
    await waitFor(() => dedicatedPids(node).length === 2 || null,
      { timeout: 30000, what: 'two dedicated processes' });
    const info = await node.nodeInfo();
    assert.deepEqual(info.dedicated, { running: 2, max: 2, suspensions: 1, idle_exits: 0 });

    const r = await node.ingress('hog', '/x');
    assert.equal(r.status, 503, r.text);
    assert.match(r.json.error, /^tenant suspended: /);
    assert.equal(r.json.state, 'suspended');
    const retry = Number(r.headers['retry-after']);
    assert.ok(Number.isInteger(retry) && retry >= 1 && retry <= 600, r.headers['retry-after']);
    assert.equal(r.json.retry_after_s, retry);
    // Neighbours in the shared processes never noticed.
    for (let i = 0; i < 5; i++) assert.equal((await node.ingress('steady', '/')).text, 'steady');
    assert.equal((await node.ingress('spin-a', '/a')).text, 'ok /a');

    const ev = await node.control('GET', '/v1/events?tenant=hog&kind=suspend');
    assert.equal(ev.json.events.length, 1);
    assert.equal(ev.json.events[0].details.cause, 'max_dedicated');
    assert.equal(ev.json.events[0].details.max_dedicated, 2);
    const m = await node.control('GET', '/metrics');
    assert.match(m.text, /^edgenode_dedicated_processes 2$/m);
    assert.match(m.text, /^edgenode_dedicated_max 2$/m);
    assert.match(m.text, /^edgenode_dedicated_suspensions_total 1$/m);
    assert.match(m.text, /^edgenode_tenant_suspended\{tenant="hog"\} 1$/m);

    // The operator lifts it: back to the shared processes.
    const u = await node.control('POST', '/v1/tenants/hog/uncordon');
    assert.deepEqual(u.json, { name: 'hog', state: 'active', was: 'suspended' });
    assert.equal((await node.ingress('hog', '/back')).text, 'ok /back');
  } finally {
    await node.stop();
  }
});

test('a suspension for the cap expires: the tenant is cordoned again and its next request starts its process', async () => {
  const node = await startNode({
    workers: 1, configFile: config({ cordon_rules: [], max_dedicated: 1, dedicated_suspend_s: 2 }),
  });
  try {
    await node.deployOk('first', SPINNER);
    await node.deployOk('second', SPINNER);
    let r = await node.control('POST', '/v1/tenants/first/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    await dedicatedReady(node, 'first');
    // Neither used any CPU: on a tie the newcomer is the one suspended.
    r = await node.control('POST', '/v1/tenants/second/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.state, 'suspended');
    assert.equal(r.json.cause, 'max_dedicated');
    r = await node.ingress('second', '/x');
    assert.equal(r.status, 503, r.text);
    assert.ok(Number(r.headers['retry-after']) <= 2, r.headers['retry-after']);

    assert.equal((await node.control('POST', '/v1/tenants/first/uncordon')).status, 200);
    const t = await state(node, 'second', 'cordoned', 'the suspension expired');
    assert.equal(t.reason, 'test');
    assert.equal(t.asleep, true);
    const ev = await node.control('GET', '/v1/events?tenant=second&kind=resume');
    assert.equal(ev.json.events[0].details.by, 'expiry');
    r = await node.ingress('second', '/again', { timeout: 60000 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.text, 'ok /again');
    const line = await node.waitForLog((l) => l.json?.tenant === 'second' && l.json.msg === 'served /again');
    assert.equal(line.json.process, 'cordon-second');
  } finally {
    await node.stop();
  }
});

test('an idle dedicated process exits; the tenant stays cordoned and its next request starts it', async () => {
  const node = await startNode({
    workers: 1, configFile: config({ cordon_rules: [], dedicated_idle_s: 2 }),
  });
  try {
    await node.deployOk('sleepy', SPINNER);
    const r = await node.control('POST', '/v1/tenants/sleepy/cordon', { body: { reason: 'test' } });
    assert.equal(r.status, 200, r.text);
    const t = await dedicatedReady(node, 'sleepy');
    assert.equal((await node.ingress('sleepy', '/one')).text, 'ok /one');
    const pid = t.dedicated.pid;
    await waitFor(() => !existsSync(`/proc/${pid}`) || null,
      { timeout: 30000, what: 'the idle dedicated process gone' });
    const idle = await waitFor(async () => {
      const x = await tenant(node, 'sleepy');
      return x.asleep ? x : null;
    }, { timeout: 10000, what: 'sleepy asleep' });
    assert.equal(idle.state, 'cordoned');
    assert.equal(idle.dedicated, undefined);
    assert.deepEqual(dedicatedPids(node), []);
    const info = await node.nodeInfo();
    assert.equal(info.dedicated.running, 0);
    assert.equal(info.dedicated.idle_exits, 1);
    const ev = await node.control('GET', '/v1/events?tenant=sleepy&kind=idle_exit');
    assert.equal(ev.json.events.length, 1);

    // The next request waits for a new process rather than failing.
    const again = await node.ingress('sleepy', '/two', { timeout: 60000 });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.text, 'ok /two');
    const line = await node.waitForLog((l) => l.json?.tenant === 'sleepy' && l.json.msg === 'served /two');
    assert.equal(line.json.process, 'cordon-sleepy');
    const back = await dedicatedReady(node, 'sleepy', { notPid: pid });
    assert.deepEqual(dedicatedPids(node), [back.dedicated.pid]);
  } finally {
    await node.stop();
  }
});

test('SIGHUP applies max_dedicated, dedicated_idle_s and dedicated_suspend_s at once', async () => {
  const dir = tempDir();
  const file = writeFile(dir, 'edgenode.json', JSON.stringify({ max_dedicated: 1 }));
  const node = await startNode({ workers: 1, configFile: file });
  try {
    assert.equal((await node.nodeInfo()).dedicated.max, 1);
    writeFile(dir, 'edgenode.json', JSON.stringify({ max_dedicated: 3, dedicated_idle_s: 5,
      dedicated_suspend_s: 7 }));
    const from = node.logs.length;
    node.proc.kill('SIGHUP');
    const line = await node.waitForLog((l) => l.json?.msg === 'configuration reloaded', { from });
    assert.deepEqual(line.json.changed.max_dedicated, { from: 1, to: 3 });
    assert.deepEqual(line.json.changed.dedicated_idle_s, { from: 60, to: 5 });
    assert.deepEqual(line.json.changed.dedicated_suspend_s, { from: 300, to: 7 });
    assert.equal(line.json.rolling_restart, false);
    assert.equal((await node.nodeInfo()).dedicated.max, 3);
  } finally {
    await node.stop();
  }
});

// Facets across the fleet (docs/fleet.md, "Facets"): three NATS servers,
// three nodes and HAProxy. A tenant's writes are published to JetStream
// before they are acknowledged, so when its owner node dies whole another
// node takes the tenant over with every acknowledged row; an owner stopped
// past its lease is fenced when it comes back; a drain hands the tenant over
// without a failed request.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
  ownerIndex, startFleetNode, startHaproxy, startNats, sleep, waitFor, waitMembers, waitReady,
} from './lib/fleet.mjs';

const LEASE_MS = 2000;
const WORKER = `export default { async fetch(req, env) {
  const url = new URL(req.url);
  env.DB.exec("CREATE TABLE IF NOT EXISTS acked (id INTEGER PRIMARY KEY, at TEXT NOT NULL)");
  if (req.method === "POST") {
    const id = Number(url.searchParams.get("id"));
    env.DB.exec("INSERT INTO acked VALUES (?, ?)", id, new Date().toISOString());
    return new Response("stored " + id);
  }
  const ids = env.DB.exec("SELECT id FROM acked ORDER BY id").toArray().map((r) => r.id);
  return Response.json({ ids });
} };`;
const SPEC = { json: true, bindings: { DB: { type: 'facet' } } };

const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

function request(port, method, urlPath, { host = 'notes.localhost', timeout = 10000 } = {}) {
  return new Promise((resolve) => {
    const req = http.request({ port, host: '127.0.0.1', method, path: urlPath, agent, headers: { host }, timeout }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text, headers: res.headers }));
      res.on('error', (err) => resolve({ error: err.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ error: err.message }));
    req.end();
  });
}

// The rows the tenant serves, asked until a node answers 200.
async function servedIds(port, { timeout = 20000, host } = {}) {
  let last;
  await waitFor(async () => {
    last = await request(port, 'GET', '/ids', { host });
    return last.status === 200;
  }, { timeout, interval: 100, what: `the tenant served again (last: ${JSON.stringify(last)})` });
  return JSON.parse(last.text).ids;
}

// One request in NATS' client protocol (no library needed): the first
// answer to our inbox, as text ("no responders" rejects at once).
function natsRequest(port, subject, payload) {
  return new Promise((resolve, reject) => {
    const c = net.connect(port, '127.0.0.1');
    let buf = '';
    c.on('data', (d) => {
      buf += d;
      if (buf.includes('-ERR')) {
        c.destroy();
        reject(new Error(buf));
        return;
      }
      // MSG <subject> <sid> <bytes> or HMSG <subject> <sid> <header bytes> <total bytes>
      // (a server routing the answer leaves the reply field empty: two spaces)
      const m = /(H?)MSG _INBOX\.t 1 +(\d+)(?: +(\d+))?\r\n/.exec(buf);
      if (!m) return;
      const total = Number(m[3] ?? m[2]);
      const start = m.index + m[0].length;
      if (buf.length < start + total) return;
      c.end();
      const headers = m[1] ? Number(m[2]) : 0;
      const head = buf.slice(start, start + headers);
      if (/^NATS\/1\.0 503/.test(head)) reject(new Error(`no responders for ${subject}`));
      else resolve(buf.slice(start + headers, start + total));
    });
    c.on('error', reject);
    c.setTimeout(5000, () => {
      c.destroy();
      reject(new Error(`no answer to ${subject} within 5 s`));
    });
    c.write(`CONNECT {"verbose":false,"headers":true,"no_responders":true}\r\nSUB _INBOX.t 1\r\n` +
      `PUB ${subject} _INBOX.t ${Buffer.byteLength(payload)}\r\n${payload}\r\n`);
  });
}

// A plain publish, answered once JetStream stored it.
async function natsPublish(port, subject, payload) {
  let text;
  for (let attempt = 0; text === undefined; attempt++) {
    try {
      text = await natsRequest(port, subject, payload);
    } catch (err) {
      if (attempt === 4) throw err;
      await sleep(500);
    }
  }
  const ack = JSON.parse(text);
  if (ack.error) throw new Error(JSON.stringify(ack.error));
  return ack;
}

function integrity(file) {
  const r = spawnSync('sqlite3', ['-batch', file, 'PRAGMA integrity_check'], { encoding: 'utf8', timeout: 60000 });
  return (r.stdout ?? '').trim() || r.stderr;
}

describe('facets in a fleet', () => {
  let nats;
  let nodes = [];
  let hp;
  let round = 0;

  before(async () => { nats = await startNats(3); });
  after(async () => {
    await hp?.stop();
    for (const n of nodes) await n?.stop().catch(() => {});
    await nats?.stop();
    agent.destroy();
  });

  async function stopAll() {
    await hp?.stop();
    hp = null;
    for (const n of nodes) await n?.stop().catch(() => {});
    nodes = [];
  }

  async function startAll(prefix, lease = LEASE_MS, extraArgs = []) {
    nodes = [];
    for (let i = 1; i <= 3; i++) {
      nodes.push(await startFleetNode(`${prefix}${i}`, nats,
        { extraArgs: ['--facet-lease-ms', String(lease), ...extraArgs] }));
    }
    await Promise.all(nodes.map(waitReady));
    await waitMembers(nodes);
    hp = await startHaproxy(nodes, { checkInter: '500ms' });
    await waitFor(async () => Object.values(await hp.serverStates()).every((s) => s === 'UP'),
      { timeout: 10000, what: 'all UP' });
  }

  test('the owner SIGKILLed mid-run: another node serves every acknowledged row, ten times', async () => {
    await startAll('kill');
    await nodes[0].deployOk('notes', WORKER, SPEC);
    const acked = [];
    let next = 1;
    const failovers = [];
    for (round = 0; round < 10; round++) {
      // a writer through HAProxy, recording what was acknowledged
      let writing = true;
      const writer = (async () => {
        while (writing) {
          const id = next++;
          const r = await request(hp.port, 'POST', `/w?id=${id}`);
          if (r.status === 200 && r.text === `stored ${id}`) acked.push(id);
          else await sleep(50);
        }
      })();
      await waitFor(() => acked.length >= (round + 1) * 20, { timeout: 30000, what: `round ${round} writes` });
      const owner = await ownerIndex(nodes, 'notes');
      assert.ok(owner >= 0, 'some node owns the tenant');
      nodes[owner].allowCrashes = true;
      const killedAt = Date.now();
      await nodes[owner].kill();
      // served again, by another node, once the lease lapsed
      const ids = await servedIds(hp.port);
      failovers.push(Date.now() - killedAt);
      writing = false;
      await writer;
      const have = new Set(await servedIds(hp.port));
      const lost = acked.filter((id) => !have.has(id));
      assert.deepEqual(lost, [], `round ${round}: acknowledged rows lost (${lost.length} of ${acked.length})`);
      assert.ok(ids.length >= acked.length - 1);
      const now = await ownerIndex(nodes, 'notes');
      assert.ok(now >= 0 && now !== owner, 'another node owns the tenant');
      const file = path.join(nodes[now].dataDir, 'facets', 'notes.sqlite');
      assert.equal(integrity(file), 'ok', `round ${round}: integrity_check of the new owner's copy`);
      // the dead node comes back (empty of the tenant until it owns it again)
      const name = `kill${owner + 1}`;
      nodes[owner] = await startFleetNode(name, nats, {
        dataDir: nodes[owner].dataDir, listen: `127.0.0.1:${nodes[owner].listenPort}`,
        control: `127.0.0.1:${nodes[owner].controlPort}`,
        extraArgs: ['--facet-lease-ms', String(LEASE_MS)],
      });
      await waitReady(nodes[owner]);
    }
    failovers.sort((a, b) => a - b);
    console.log(`failover after SIGKILL of the owner: median ${failovers[5]} ms, max ${failovers[9]} ms ` +
      `(lease ${LEASE_MS} ms); ${acked.length} acknowledged rows, none lost`);
    await stopAll();
  });

  test('a request reaching a node that does not own the tenant is forwarded to the owner', async () => {
    await startAll('fwd');
    try {
      await nodes[0].deployOk('fwd', WORKER, SPEC);
      const first = await nodes[0].ingress('fwd', '/w?id=1', { method: 'POST' });
      assert.equal(first.status, 200, first.text);
      for (const i of [1, 2]) {
        const r = await nodes[i].ingress('fwd', `/w?id=${i + 1}`, { method: 'POST' });
        assert.equal(r.status, 200, `node ${i + 1}: ${r.status} ${r.text}`);
        assert.equal(r.text, `stored ${i + 1}`);
      }
      assert.equal(await ownerIndex(nodes, 'fwd'), 0, 'the first node still owns the tenant');
      const r = await nodes[2].ingress('fwd', '/ids');
      assert.deepEqual(JSON.parse(r.text).ids, [1, 2, 3]);
      // a request marked forwarded is not forwarded again: it is refused
      const again = await nodes[1].ingress('fwd', '/ids', { headers: { 'x-edgenode-forwarded': '1' } });
      assert.equal(again.status, 503);
      assert.match(JSON.parse(again.text).error, /forwarded here/);
      assert.equal(again.headers['retry-after'], '1');
    } finally {
      await stopAll();
    }
  });

  test('an owner stopped past its lease and resumed cannot write, and serves the tenant no more', async () => {
    await startAll('stop');
    try {
      await nodes[0].deployOk('stopped', WORKER, SPEC);
      for (let id = 1; id <= 5; id++) {
        const r = await nodes[0].ingress('stopped', `/w?id=${id}`, { method: 'POST' });
        assert.equal(r.status, 200, r.text);
      }
      const pgid = nodes[0].proc.pid;
      process.kill(-pgid, 'SIGSTOP');
      let resumed = false;
      try {
        // another node takes the tenant over once the lease lapsed, and
        // writes (only then: a write sent earlier would be forwarded to the
        // stopped owner and wait in its socket until it resumes)
        await sleep(LEASE_MS + 500);
        const at = Date.now();
        for (let id = 6; id <= 10; id++) {
          await waitFor(async () => {
            const r = await nodes[1].ingress('stopped', `/w?id=${id}`, { method: 'POST', timeout: 3000 });
            return r.status === 200;
          }, { timeout: 20000, interval: 100, what: `write ${id} through the second node` });
        }
        console.log(`taken over, and five writes, ${Date.now() - at} ms after the lease lapsed`);
        assert.equal(await ownerIndex(nodes.slice(1).concat([null]), 'stopped'), 0, 'the second node owns it');
        process.kill(-pgid, 'SIGCONT');
        resumed = true;
        // A write sent to the old owner is either refused (its lease lapsed:
        // its own commit is fenced) or forwarded to the new owner; either
        // way nothing lands in the old copy alone.
        const stale = await nodes[0].ingress('stopped', '/w?id=99', { method: 'POST' });
        await waitFor(() => nodes[0].logs.some((l) => l.json?.tenant === 'stopped' &&
          /no longer owns them/.test(l.json?.msg ?? '')), { timeout: 5000, what: 'the old owner gives the tenant up' });
        const expected = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, ...(stale.status === 200 ? [99] : [])];
        // it serves the tenant no more from its copy: what it answers comes
        // from the new owner (forwarded), with every row
        await waitFor(async () => {
          const r = await nodes[0].ingress('stopped', '/ids');
          return r.status === 200 && JSON.parse(r.text).ids.length === expected.length;
        }, { timeout: 10000, what: 'the resumed node forwards to the new owner' });
        const r = await nodes[0].ingress('stopped', '/ids');
        assert.deepEqual(JSON.parse(r.text).ids, expected);
        const direct = await nodes[1].ingress('stopped', '/ids');
        assert.deepEqual(JSON.parse(direct.text).ids, expected, 'the new owner has the same rows');
        const fleet = await nodes[0].control('GET', '/v1/fleet');
        assert.ok(!fleet.json.facets.includes('stopped'), 'the resumed node does not claim the tenant');
        assert.ok(!existsSync(path.join(nodes[0].dataDir, 'facets', 'stopped.sqlite')), 'and dropped its copy');
        const events = await nodes[0].control('GET', '/v1/events');
        assert.ok(JSON.stringify(events.json).includes('facets_lost'), 'the loss is an event');
      } finally {
        if (!resumed) process.kill(-pgid, 'SIGCONT');
      }
    } finally {
      await stopAll();
    }
  });

  test('a drain hands the tenant over with no failed request', async () => {
    await startAll('drain');
    try {
      await nodes[0].deployOk('drained', WORKER, SPEC);
      const acked = [];
      const failures = [];
      let next = 1;
      let writing = true;
      const writers = [0, 1].map(async () => {
        while (writing) {
          const id = next++;
          const r = await request(hp.port, 'POST', `/w?id=${id}`, { host: 'drained.localhost' });
          if (r.status === 200 && r.text === `stored ${id}`) acked.push(id);
          else failures.push({ id, ...r });
        }
      });
      await waitFor(() => acked.length >= 30, { timeout: 20000, what: 'writes before the drain' });
      const owner = await ownerIndex(nodes, 'drained');
      assert.ok(owner >= 0);
      const drain = await nodes[owner].control('POST', '/v1/node/drain');
      assert.ok(drain.status === 200 || drain.status === 202, drain.text);
      // the tenant moves, and writes go on through HAProxy
      await waitFor(async () => {
        const i = await ownerIndex(nodes, 'drained');
        return i >= 0 && i !== owner;
      }, { timeout: 20000, what: 'another node owns the tenant' });
      const movedAt = acked.length;
      await waitFor(() => acked.length >= movedAt + 30, { timeout: 20000, what: 'writes after the drain' });
      writing = false;
      await Promise.all(writers);
      assert.deepEqual(failures, [], 'no request failed during the drain');
      const have = new Set(await servedIds(hp.port, { host: 'drained.localhost' }));
      assert.deepEqual(acked.filter((id) => !have.has(id)), [], 'no acknowledged row lost');
      console.log(`drain hand-over: ${acked.length} writes, 0 failed`);
    } finally {
      await stopAll();
    }
  });

  test('an owner whose lease was taken while it ran is fenced at its next write', async () => {
    // A long lease: the first node would not notice the loss for 10 s by
    // itself, so only the stream's refusal of its next record stops it.
    await startAll('fence', 30000);
    try {
      await nodes[0].deployOk('fenced', WORKER, SPEC);
      for (let id = 1; id <= 3; id++) {
        const r = await nodes[0].ingress('fenced', `/w?id=${id}`, { method: 'POST' });
        assert.equal(r.status, 200, r.text);
      }
      // The lease rewritten for the second node behind the first's back,
      // as a split brain would: a plain KV put, in NATS' own protocol.
      await natsPublish(nats.servers[0].port, '$KV.edgenode_leases.fenced', 'fence2 30000');
      const taken = await nodes[1].ingress('fenced', '/w?id=4', { method: 'POST' });
      assert.equal(taken.status, 200, `the second node took the tenant over: ${taken.text}`);
      const stale = await nodes[0].ingress('fenced', '/w?id=5', { method: 'POST',
        headers: { 'x-edgenode-forwarded': '1' } });
      assert.equal(stale.status, 500, `the first node's write is refused: ${stale.status} ${stale.text}`);
      assert.match(stale.text, /could not be stored/);
      await waitFor(() => nodes[0].logs.some((l) => /is fenced/.test(l.json?.msg ?? '') ||
        /is fenced/.test(l.json?.why ?? '') || /fenced/.test(l.raw)), { timeout: 5000, what: 'a fence in the log' });
      const r = await nodes[1].ingress('fenced', '/ids');
      assert.deepEqual(JSON.parse(r.text).ids, [1, 2, 3, 4], 'the refused write is nowhere');
      // the first node forwards from now on
      const via = await nodes[0].ingress('fenced', '/ids');
      assert.equal(via.status, 200, via.text);
      assert.deepEqual(JSON.parse(via.text).ids, [1, 2, 3, 4]);
    } finally {
      await stopAll();
    }
  });

  test('snapshots trim the stream, and a take-over restores one and replays the rest', async () => {
    await startAll('snap', LEASE_MS, ['--facet-snapshot-every', '20']);
    try {
      await nodes[0].deployOk('snapped', WORKER, SPEC);
      for (let id = 1; id <= 100; id++) {
        const r = await nodes[0].ingress('snapped', `/w?id=${id}`, { method: 'POST' });
        assert.equal(r.status, 200, r.text);
      }
      await waitFor(() => nodes[0].logs.some((l) => l.json?.tenant === 'snapped' &&
        /snapshot of records 1\.\.(8\d|9\d)/.test(l.json?.msg ?? '')), { timeout: 15000, what: 'a late snapshot' });
      const info = JSON.parse(await natsRequest(nats.servers[0].port, '$JS.API.STREAM.INFO.EDGENODE_FACETS',
        JSON.stringify({ subjects_filter: 'fct.snapped.*' })));
      const kept = Object.keys(info.state?.subjects ?? {}).length;
      assert.ok(kept > 0 && kept < 40, `records kept after the snapshots: ${kept} of 101`);
      nodes[0].allowCrashes = true;
      await nodes[0].kill();
      const ids = await servedIds(nodes[1].listenPort, { host: 'snapped.localhost' });
      assert.deepEqual(ids, Array.from({ length: 100 }, (_, k) => k + 1));
      const now = await ownerIndex(nodes.map((n, k) => (k === 0 ? null : n)), 'snapped');
      assert.ok(now > 0);
      assert.ok(nodes[now].logs.some((l) => /owns them now/.test(l.json?.msg ?? '')));
      assert.equal(integrity(path.join(nodes[now].dataDir, 'facets', 'snapped.sqlite')), 'ok');
    } finally {
      await stopAll();
    }
  });
});

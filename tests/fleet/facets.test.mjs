// Facets across the fleet (docs/fleet.md, "Facets"): three NATS servers,
// three nodes and HAProxy. A tenant's writes are published to JetStream
// before they are acknowledged, so when its owner node dies whole another
// node takes the tenant over with every acknowledged row; an owner stopped
// past its lease is fenced when it comes back; a drain hands the tenant over
// without a failed request.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { startFleetNode, startHaproxy, startNats, sleep, waitFor } from './lib/fleet.mjs';

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
async function servedIds(port, { timeout = 20000 } = {}) {
  let last;
  await waitFor(async () => {
    last = await request(port, 'GET', '/ids');
    return last.status === 200;
  }, { timeout, interval: 100, what: `the tenant served again (last: ${JSON.stringify(last)})` });
  return JSON.parse(last.text).ids;
}

async function waitReady(node) {
  await waitFor(async () => (await node.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 20000, what: 'ready' });
}

// Which node owns the tenant: the one whose /v1/fleet lists it.
async function ownerIndex(nodes) {
  for (let i = 0; i < nodes.length; i++) {
    if (!nodes[i]) continue;
    const r = await nodes[i].control('GET', '/v1/fleet').catch(() => null);
    if (r?.json?.facets?.includes('notes')) return i;
  }
  return -1;
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

  async function startAll(prefix) {
    nodes = [];
    for (let i = 1; i <= 3; i++) {
      nodes.push(await startFleetNode(`${prefix}${i}`, nats, { extraArgs: ['--facet-lease-ms', String(LEASE_MS)] }));
    }
    await Promise.all(nodes.map(waitReady));
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
      const owner = await ownerIndex(nodes);
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
      const now = await ownerIndex(nodes);
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
    await hp.stop();
    hp = null;
    for (const n of nodes) await n.stop().catch(() => {});
    nodes = [];
  });
});

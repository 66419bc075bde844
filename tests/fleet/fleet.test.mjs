// The fleet as an operator and its clients see it: three edgenode nodes on
// a three-server NATS JetStream cluster, behind HAProxy, all real, all on
// loopback. A write on any node's control API is served by every node.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';

import { EDGECTL, EDGENODE, runProcess, tempDir } from '../e2e/lib/node.mjs';
import { servedBody, startFleetNode, startNats, sleep, waitFor } from './lib/fleet.mjs';

const worker = (text) => `export default { fetch() { return new Response(${JSON.stringify(text)}); } };`;

async function waitReady(node, timeout = 20000) {
  await waitFor(async () => {
    const r = await node.control('GET', '/readyz', { token: null });
    return r.status === 200;
  }, { timeout, what: `node on ${node.controlPort} ready` });
}

// Every file under dir, as latin1 text (binary-safe for a substring search).
function filesUnder(dir) {
  const out = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const f = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...filesUnder(f));
    else if (e.isFile()) out.push({ file: f, text: readFileSync(f).toString('latin1') });
  }
  return out;
}

describe('a fleet of three nodes', () => {
  let nats;
  let upstream;
  let upstreamPort;
  const nodes = [];
  const keyDir = tempDir('edgenode-fleet-key-');
  const keyFile = path.join(keyDir, 'fleet.key');

  before(async () => {
    // The operator's fleet key: one file, the same on every node, mode 0600.
    writeFileSync(keyFile, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
    upstream = http.createServer((req, res) => res.end(JSON.stringify({ authorization: req.headers.authorization ?? null })));
    await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
    upstreamPort = upstream.address().port;
    nats = await startNats(3);
    const extraArgs = ['--fleet-key', keyFile, '--egress-allow-cidr', '127.0.0.1/32'];
    for (let i = 1; i <= 3; i++) nodes.push(await startFleetNode(`node${i}`, nats, { extraArgs }));
    await Promise.all(nodes.map((n) => waitReady(n)));
  });

  after(async () => {
    for (const n of nodes) await n.stop().catch(() => {});
    await nats?.stop();
    upstream?.close();
  });

  test('a deploy on node 1 is served by nodes 2 and 3; a delete on node 3 is gone everywhere', async () => {
    const r = await nodes[0].deploy('greet', worker('hello from the fleet'));
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.version, 1);
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'greet')) === '200 hello from the fleet',
        { timeout: 5000, what: `greet served on ${n.controlPort}` });
      const w = await n.control('GET', '/v1/workers/greet');
      assert.equal(w.status, 200);
      assert.equal(w.json.version, 1);
    }
    const d = await nodes[2].control('DELETE', '/v1/workers/greet');
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.deleted, 'greet');
    for (const n of nodes) {
      await waitFor(async () => (await n.control('GET', '/v1/workers/greet')).status === 404,
        { timeout: 5000, what: 'greet gone' });
      assert.equal((await n.ingress('greet')).status, 404);
    }
    const again = await nodes[1].control('DELETE', '/v1/workers/greet');
    assert.equal(again.status, 404, again.text);
    assert.equal(again.json.error, 'unknown worker');
  });

  test('a rollback on node 2 is a fleet write: every node serves the old code as a new version', async () => {
    await nodes[0].deployOk('roll', worker('roll v1'));
    await nodes[0].deployOk('roll', worker('roll v2'));
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'roll')) === '200 roll v2',
        { timeout: 5000, what: `roll v2 on ${n.controlPort}` });
    }
    const r = await nodes[1].control('POST', '/v1/workers/roll/rollback', { body: { version: 1 } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.version, 3);
    assert.equal(r.json.rollback_of, 1);
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'roll')) === '200 roll v1',
        { timeout: 5000, what: `roll v1 again on ${n.controlPort}` });
      const v = await waitFor(async () => {
        const list = (await n.control('GET', '/v1/workers/roll/versions')).json;
        return list.current === 3 ? list : null;
      }, { timeout: 5000, what: 'version 3 listed' });
      assert.deepEqual(v.versions.map((x) => [x.version, x.rollback_of ?? null]), [[3, 1], [2, null], [1, null]]);
      assert.equal(v.versions[0].hash, v.versions[2].hash);
    }
  });

  test('a traffic split set on node 1 holds on every node, each key on one version everywhere; a deploy on node 3 ends it', async () => {
    await nodes[0].deployOk('split', worker('split v1'));
    await nodes[0].deployOk('split', worker('split v2'));
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'split')) === '200 split v2',
        { timeout: 5000, what: `split v2 on ${n.controlPort}` });
    }
    const r = await nodes[0].control('PUT', '/v1/workers/split/traffic', { body: { 2: 50, 1: 50 } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.gradual, true);
    for (const n of nodes) {
      await waitFor(async () => (await n.control('GET', '/v1/workers/split/traffic')).json.gradual === true,
        { timeout: 5000, what: `the split on ${n.controlPort}` });
    }
    const served = async (n, key) => {
      const res = await n.ingress('split', '/', { headers: { 'x-edgenode-traffic-key': key } });
      return res.text;
    };
    const counts = {};
    for (let i = 0; i < 60; i++) {
      const seen = new Set();
      for (const n of nodes) seen.add(await served(n, `user-${i}`));
      assert.equal(seen.size, 1, `user-${i} got ${[...seen]}`);
      const [v] = seen;
      counts[v] = (counts[v] ?? 0) + 1;
    }
    assert.ok(counts['split v1'] > 0 && counts['split v2'] > 0, JSON.stringify(counts));
    const d = await nodes[2].deploy('split', worker('split v3'));
    assert.equal(d.status, 200, d.text);
    for (const n of nodes) {
      await waitFor(async () => {
        const t = (await n.control('GET', '/v1/workers/split/traffic')).json;
        return t.gradual === false && t.current === 3;
      }, { timeout: 5000, what: `the split ended on ${n.controlPort}` });
      assert.equal(await served(n, 'user-1'), 'split v3');
    }
  });

  test('20 concurrent deploys of one name on three nodes give versions 1 to 20, and every node ends on the same code', async () => {
    const results = await Promise.all(Array.from({ length: 20 }, (_, i) =>
      nodes[i % 3].deploy('race', worker(`deploy ${i}`))));
    for (const r of results) assert.ok(r.status === 200 || r.status === 201, r.text);
    const versions = results.map((r) => r.json.version).sort((a, b) => a - b);
    assert.deepEqual(versions, Array.from({ length: 20 }, (_, i) => i + 1));
    const last = results.find((r) => r.json.version === 20);
    const lastText = `deploy ${results.indexOf(last)}`;
    for (const n of nodes) {
      await waitFor(async () => (await n.control('GET', '/v1/workers/race')).json?.version === 20,
        { timeout: 5000, what: 'version 20 everywhere' });
      await waitFor(async () => (await servedBody(n, 'race')) === `200 ${lastText}`,
        { timeout: 5000, what: `${lastText} served` });
    }
  });

  test('a worker with 3 MiB of code (over the NATS max_payload of 1 MiB) deployed on node 1 is served by nodes 2 and 3', async () => {
    // Numbered blocks, so that a chunk lost, doubled or out of place changes what is served.
    let pad = '';
    for (let i = 0; pad.length < 3 << 20; i++) pad += `<${i}>`.padEnd(64, '.');
    const code = `const PAD = ${JSON.stringify(pad)};\n`
      + 'export default { fetch() { return new Response(`${PAD.length} ${PAD.slice(1 << 20, (1 << 20) + 16)} ${PAD.slice(-64, -56)}`); } };\n';
    assert.ok(code.length > 3 << 20);
    const expected = `200 ${pad.length} ${pad.slice(1 << 20, (1 << 20) + 16)} ${pad.slice(-64, -56)}`;
    // Parsing 3 MiB of source takes more than the default 50 ms of CPU on a busy machine.
    const r = await nodes[0].deploy('large', code, { json: true, limits: { cpu_ms: 5000 } });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.version, 1);
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'large')) === expected,
        { timeout: 20000, what: `the large worker served on ${n.controlPort}` });
      const w = await n.control('GET', '/v1/workers/large');
      assert.equal(w.status, 200);
      assert.equal(w.json.version, 1);
    }
    const m = await nodes[0].control('GET', '/metrics');
    assert.match(m.text, /^edgenode_fleet_chunked_writes_total [1-9]\d*$/m);
    for (const n of nodes) {
      assert.match((await n.control('GET', '/metrics')).text, /^edgenode_fleet_damaged_total 0$/m);
    }
    // A small deploy over it, from another node, is a plain record again.
    const small = await nodes[1].deploy('large', worker('small again'));
    assert.equal(small.status, 200, small.text);
    assert.equal(small.json.version, 2);
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'large')) === '200 small again',
        { timeout: 10000, what: `small again on ${n.controlPort}` });
    }
  });

  test('egress rules set on one node reach the others', async () => {
    await nodes[0].deploy('caller', worker('calls out'));
    // the deploy is acknowledged once applied on node 1; node 2 applies it from its watch
    await waitFor(async () => (await nodes[1].control('GET', '/v1/workers/caller')).status === 200,
      { timeout: 5000, what: 'the worker on node 2' });
    const rules = [{ match: 'https://api.example.com/*' }];
    const r = await nodes[1].control('PUT', '/v1/workers/caller/egress', { body: { rules } });
    assert.equal(r.status, 200, r.text);
    for (const n of nodes) {
      await waitFor(async () => {
        const g = await n.control('GET', '/v1/workers/caller/egress');
        return g.status === 200 && g.json.rules.length === 1;
      }, { timeout: 5000, what: 'rules everywhere' });
    }
  });

  test('a secret written on node 1 is injected by node 2\'s egress; the fleet holds only its ciphertext', async () => {
    const value = `fleet-${randomBytes(12).toString('hex')}`;
    const put = await nodes[0].control('PUT', '/v1/secrets/FLEET_TOKEN', { body: { value, workers: ['fetcher'] } });
    assert.equal(put.status, 201, put.text);
    assert.deepEqual(put.json.workers, ['fetcher']);
    const fetcher = `export default { async fetch() {
      try { return new Response(await (await fetch('http://127.0.0.1:${upstreamPort}/api/x')).text()); }
      catch (err) { return new Response(err.message, { status: 502 }); } } };`;
    const rules = [{ match: `http://127.0.0.1:${upstreamPort}/api/*`, inject: { headers: { Authorization: 'Bearer ${secret:FLEET_TOKEN}' } } }];
    const d = await nodes[0].control('PUT', '/v1/workers/fetcher', { body: { modules: { 'index.js': fetcher }, egress: rules } });
    assert.equal(d.status, 201, d.text);
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'fetcher')) === `200 ${JSON.stringify({ authorization: `Bearer ${value}` })}`,
        { timeout: 10000, what: `the secret injected on ${n.controlPort}` });
    }
    // every node lists it with its grants, never its value
    for (const n of nodes) {
      const list = await n.control('GET', '/v1/secrets');
      const entry = list.json.secrets.find((s) => s.name === 'FLEET_TOKEN');
      assert.deepEqual(entry?.workers, ['fetcher'], list.text);
      assert.ok(!list.text.includes(value));
    }
    // another worker's deploy naming it is refused on any node
    const thief = await nodes[2].control('PUT', '/v1/workers/thief', {
      body: { modules: { 'index.js': fetcher }, egress: rules },
    });
    assert.equal(thief.status, 400, thief.text);
    assert.equal(thief.json.error, 'secret FLEET_TOKEN is not granted to worker thief');

    // The stream's files on every NATS server name the record but never hold
    // the value; nor does any node's data directory or log.
    await waitFor(() => nats.servers.every((s) =>
      filesUnder(path.join(nats.dir, s.name)).some((f) => f.text.includes('rec.secrets.FLEET_TOKEN'))),
    { timeout: 10000, what: 'the secrets record on disk on every NATS server' });
    const stored = filesUnder(nats.dir).filter((f) => f.text.includes('rec.secrets.FLEET_TOKEN'));
    assert.ok(stored.length >= 3);
    assert.ok(stored.some((f) => /"nonce":"[0-9a-f]{48}"/.test(f.text) && /"sealed":"[0-9a-f]{40,}"/.test(f.text) &&
      /"key":"[0-9a-f]{16}"/.test(f.text)), 'the record holds the sealed value');
    for (const f of filesUnder(nats.dir)) assert.ok(!f.text.includes(value), `${f.file} holds the plaintext`);
    for (const n of nodes) {
      for (const f of filesUnder(n.dataDir)) assert.ok(!f.text.includes(value), `${f.file} holds the plaintext`);
      assert.ok(!n.logs.some((l) => l.raw.includes(value)), 'a log line holds the secret');
    }

    // a revocation on node 3 stops node 2's injection
    const revoke = await nodes[2].control('DELETE', '/v1/secrets/FLEET_TOKEN/workers/fetcher');
    assert.equal(revoke.status, 200, revoke.text);
    assert.deepEqual(revoke.json.workers, []);
    await waitFor(async () => (await servedBody(nodes[1], 'fetcher')).startsWith('502 secret "FLEET_TOKEN" is not granted to worker fetcher'),
      { timeout: 10000, what: 'the revocation on node 2' });
    // granted again and rotated on node 2: node 1 injects the new value
    const rotated = `${value}-2`;
    assert.equal((await nodes[1].control('PUT', '/v1/secrets/FLEET_TOKEN/workers/fetcher')).status, 200);
    const rot = await nodes[1].control('PUT', '/v1/secrets/FLEET_TOKEN', { body: rotated, headers: { 'content-type': 'text/plain' } });
    assert.equal(rot.status, 200, rot.text);
    assert.deepEqual(rot.json.workers, ['fetcher']);
    await waitFor(async () => (await servedBody(nodes[0], 'fetcher')).includes(`Bearer ${rotated}`),
      { timeout: 10000, what: 'the rotated value on node 1' });
    // deleted on node 2: gone everywhere
    assert.equal((await nodes[1].control('DELETE', '/v1/secrets/FLEET_TOKEN')).status, 200);
    for (const n of nodes) {
      await waitFor(async () => !(await n.control('GET', '/v1/secrets')).json.secrets.some((s) => s.name === 'FLEET_TOKEN'),
        { timeout: 10000, what: 'the secret gone' });
    }
    assert.equal((await nodes[0].control('DELETE', '/v1/secrets/FLEET_TOKEN')).status, 404);
  });

  test('a fleet key readable by others, or of the wrong size, is refused at start', async () => {
    const loose = path.join(keyDir, 'loose.key');
    writeFileSync(loose, randomBytes(32), { mode: 0o644 });
    assert.equal(statSync(loose).mode & 0o777, 0o644);
    const r = await runProcess(EDGENODE, ['--listen', '127.0.0.1:0',
      '--control', '127.0.0.1:0', '--data', tempDir(), '--fleet', nats.urls, '--fleet-key', loose]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /--fleet-key .*loose\.key: must be a file not readable by group or others/);
    const short = path.join(keyDir, 'short.key');
    writeFileSync(short, 'too short\n', { mode: 0o600 });
    const s = await runProcess(EDGENODE, ['--listen', '127.0.0.1:0', '--control', '127.0.0.1:0',
      '--data', tempDir(), '--fleet', nats.urls, '--fleet-key', short]);
    assert.notEqual(s.code, 0);
    assert.match(s.stderr, /--fleet-key .*short\.key: must hold 32 bytes, raw or as 64 hex digits/);
  });

  test('an operator cordon on one node holds on every node, and so does the uncordon', async () => {
    await nodes[0].deployOk('noisy', worker('noisy'));
    const c = await nodes[1].control('POST', '/v1/tenants/noisy/cordon', { body: { reason: 'too loud' } });
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.state, 'cordoned');
    for (const n of nodes) {
      await waitFor(async () => {
        const t = await n.control('GET', '/v1/tenants');
        return t.json.tenants.find((x) => x.name === 'noisy')?.state === 'cordoned';
      }, { timeout: 10000, what: 'cordoned everywhere' });
      await waitFor(async () => (await servedBody(n, 'noisy')) === '200 noisy',
        { timeout: 10000, what: 'served from its dedicated process' });
    }
    const again = await nodes[2].control('POST', '/v1/tenants/noisy/cordon');
    assert.equal(again.status, 409);
    const u = await nodes[2].control('POST', '/v1/tenants/noisy/uncordon');
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.was, 'cordoned');
    for (const n of nodes) {
      await waitFor(async () => {
        const t = await n.control('GET', '/v1/tenants');
        return t.json.tenants.find((x) => x.name === 'noisy')?.state === 'active';
      }, { timeout: 10000, what: 'active everywhere' });
      assert.equal(await servedBody(n, 'noisy'), '200 noisy');
    }
  });

  test("the cordon monitor's cordon on one node holds on every node, until an operator uncordons it", async () => {
    const spinner = `export default { fetch(request) {
      if (new URL(request.url).pathname === '/spin') { while (true) {} }
      return new Response('spinner'); } };`;
    await nodes[0].deployOk('spinner', spinner, { json: true, limits: { cpu_ms: 20 } });
    await waitFor(async () => (await servedBody(nodes[2], 'spinner')) === '200 spinner',
      { timeout: 5000, what: 'spinner everywhere' });
    // The default rules include cpu_limit_hits >= 3 in 60s; the hits are node 1's alone.
    for (let i = 0; i < 3; i++) assert.equal((await nodes[0].ingress('spinner', '/spin')).status, 503);
    for (const n of nodes) {
      await waitFor(async () => {
        const t = await n.control('GET', '/v1/tenants');
        const x = t.json.tenants.find((y) => y.name === 'spinner');
        return x?.state === 'cordoned' && x.by === 'monitor' && x.rule === 'cpu_limit_hits >= 3 in 60s';
      }, { timeout: 10000, what: `the monitor's cordon on ${n.controlPort}` });
    }
    const u = await nodes[2].control('POST', '/v1/tenants/spinner/uncordon');
    assert.equal(u.status, 200, u.text);
    for (const n of nodes) {
      await waitFor(async () => {
        const t = await n.control('GET', '/v1/tenants');
        return t.json.tenants.find((x) => x.name === 'spinner')?.state === 'active';
      }, { timeout: 10000, what: 'active everywhere' });
    }
  });

  test('GET /v1/fleet lists the three nodes, alive and in step; /metrics has the fleet', async () => {
    await waitFor(async () => (await nodes[0].control('GET', '/v1/fleet')).json?.nodes?.length === 3,
      { timeout: 5000, what: 'three members' });
    const f = await nodes[0].control('GET', '/v1/fleet');
    assert.equal(f.status, 200);
    assert.equal(f.json.node, 'node1');
    assert.equal(f.json.connected, true);
    const names = f.json.nodes.map((m) => m.name).sort();
    assert.deepEqual(names, ['node1', 'node2', 'node3']);
    for (const m of f.json.nodes) {
      assert.equal(m.alive, true);
      assert.equal(m.state, 'serving');
      assert.match(m.listen, /^127\.0\.0\.1:\d+$/);
      assert.deepEqual(Object.keys(m.load).sort(), ['cpu', 'in_flight', 'requests_per_s']);
    }
    await waitFor(async () => (await nodes[0].control('GET', '/v1/fleet')).json.nodes.every((m) => m.behind === 0),
      { timeout: 5000, what: 'no node behind' });
    // edgectl fleet: the same as a table
    const ctl = await runProcess(EDGECTL, ['--node', `http://127.0.0.1:${nodes[1].controlPort}`,
      '--token-file', path.join(nodes[1].dataDir, 'control.token'), 'fleet']);
    assert.equal(ctl.code, 0, ctl.stderr);
    assert.match(ctl.stdout, /^node: node2 \(connected to nats:\/\/127\.0\.0\.1:\d+, in sync\)$/m);
    for (const name of ['node1', 'node2 \\*', 'node3']) {
      assert.match(ctl.stdout, new RegExp(`^${name}\\s+serving\\s+yes\\s+0\\.1\\.0\\s`, 'm'));
    }
    const m = await nodes[2].control('GET', '/metrics');
    assert.match(m.text, /^edgenode_fleet_connected 1$/m);
    assert.match(m.text, /^edgenode_fleet_synced 1$/m);
    assert.match(m.text, /^edgenode_fleet_lag 0$/m);
    // the applied revision: the stream sequence of the last record applied, as GET /v1/fleet says
    const applied = Number(/^edgenode_fleet_applied_sequence (\d+)$/m.exec(m.text)?.[1]);
    assert.ok(applied > 0, m.text);
    assert.equal(applied, (await nodes[2].control('GET', '/v1/fleet')).json.applied);
  });

  test('with one NATS server killed writes go on; with all killed nodes serve and refuse writes; back, they converge', async () => {
    await nodes[0].deployOk('steady', worker('steady v1'));
    await nats.kill(0);
    const during = await nodes[1].deploy('steady', worker('steady v2'));
    assert.equal(during.status, 200, during.text);
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'steady')) === '200 steady v2',
        { timeout: 10000, what: 'v2 everywhere' });
    }

    await nats.kill(1);
    await nats.kill(2);
    await sleep(3000); // past the nodes' notice of the outage
    for (const n of nodes) {
      assert.equal(await servedBody(n, 'steady'), '200 steady v2');
      const w = await n.deploy('steady', worker('steady v3'));
      assert.equal(w.status, 503, w.text);
      assert.deepEqual(w.json, { error: 'fleet unavailable' });
      assert.equal((await n.control('DELETE', '/v1/workers/steady')).status, 503);
      const ready = await n.control('GET', '/readyz', { token: null });
      assert.equal(ready.status, 200, 'a node in sync before serves on when NATS is away');
    }

    await Promise.all([0, 1, 2].map((i) => nats.start(i)));
    let after;
    await waitFor(async () => {
      after = await nodes[2].deploy('steady', worker('steady v3'));
      return after.status === 200;
    }, { timeout: 40000, interval: 500, what: 'writes accepted again' });
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, 'steady')) === '200 steady v3',
        { timeout: 20000, what: 'v3 everywhere' });
    }
  });
});

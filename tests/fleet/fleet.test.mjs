// The fleet as an operator and its clients see it: three edgenode nodes on
// a three-server NATS JetStream cluster, behind HAProxy, all real, all on
// loopback. A write on any node's control API is served by every node.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import path from 'node:path';

import { EDGECTL, runProcess } from '../e2e/lib/node.mjs';
import { startFleetNode, startNats, sleep, waitFor } from './lib/fleet.mjs';

const worker = (text) => `export default { fetch() { return new Response(${JSON.stringify(text)}); } };`;

async function body(node, name) {
  try {
    const r = await node.ingress(name, '/', { timeout: 3000 });
    return `${r.status} ${r.text}`;
  } catch (err) {
    return `error ${err.message}`;
  }
}

async function waitReady(node, timeout = 20000) {
  await waitFor(async () => {
    const r = await node.control('GET', '/readyz', { token: null });
    return r.status === 200;
  }, { timeout, what: `node on ${node.controlPort} ready` });
}

describe('a fleet of three nodes', () => {
  let nats;
  const nodes = [];

  before(async () => {
    nats = await startNats(3);
    for (let i = 1; i <= 3; i++) nodes.push(await startFleetNode(`node${i}`, nats));
    await Promise.all(nodes.map((n) => waitReady(n)));
  });

  after(async () => {
    for (const n of nodes) await n.stop().catch(() => {});
    await nats?.stop();
  });

  test('a deploy on node 1 is served by nodes 2 and 3; a delete on node 3 is gone everywhere', async () => {
    const r = await nodes[0].deploy('greet', worker('hello from the fleet'));
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.version, 1);
    for (const n of nodes) {
      await waitFor(async () => (await body(n, 'greet')) === '200 hello from the fleet',
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
      await waitFor(async () => (await body(n, 'race')) === `200 ${lastText}`,
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
      await waitFor(async () => (await body(n, 'large')) === expected,
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
      await waitFor(async () => (await body(n, 'large')) === '200 small again',
        { timeout: 10000, what: `small again on ${n.controlPort}` });
    }
  });

  test('egress rules set on one node reach the others', async () => {
    await nodes[0].deploy('caller', worker('calls out'));
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
      await waitFor(async () => (await body(n, 'noisy')) === '200 noisy',
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
      assert.equal(await body(n, 'noisy'), '200 noisy');
    }
  });

  test("the cordon monitor's cordon on one node holds on every node, until an operator uncordons it", async () => {
    const spinner = `export default { fetch(request) {
      if (new URL(request.url).pathname === '/spin') { while (true) {} }
      return new Response('spinner'); } };`;
    await nodes[0].deployOk('spinner', spinner, { json: true, limits: { cpu_ms: 20 } });
    await waitFor(async () => (await body(nodes[2], 'spinner')) === '200 spinner',
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
  });

  test('with one NATS server killed writes go on; with all killed nodes serve and refuse writes; back, they converge', async () => {
    await nodes[0].deployOk('steady', worker('steady v1'));
    await nats.kill(0);
    const during = await nodes[1].deploy('steady', worker('steady v2'));
    assert.equal(during.status, 200, during.text);
    for (const n of nodes) {
      await waitFor(async () => (await body(n, 'steady')) === '200 steady v2',
        { timeout: 10000, what: 'v2 everywhere' });
    }

    await nats.kill(1);
    await nats.kill(2);
    await sleep(3000); // past the nodes' notice of the outage
    for (const n of nodes) {
      assert.equal(await body(n, 'steady'), '200 steady v2');
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
      await waitFor(async () => (await body(n, 'steady')) === '200 steady v3',
        { timeout: 20000, what: 'v3 everywhere' });
    }
  });
});

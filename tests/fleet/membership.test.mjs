// What one node tells the others through its heartbeat, as an operator
// reads it on another node (GET /v1/fleet, edgectl fleet): its load while
// requests are in flight on it, and a drain going from "draining" to
// "drained". And a node joining with an empty data directory while the
// fleet holds many records: /readyz 503 until it holds them all, then 200.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { EDGECTL, runProcess, tempDir } from '../e2e/lib/node.mjs';
import { startFleetNode, startNats, waitFor } from './lib/fleet.mjs';

const worker = (text) => `export default { fetch() { return new Response(${JSON.stringify(text)}); } };`;

async function waitReady(node) {
  await waitFor(async () => (await node.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 20000, what: `node on ${node.controlPort} ready` });
}

// node's row for `name` in GET /v1/fleet
async function member(node, name) {
  const f = await node.control('GET', '/v1/fleet');
  return f.json?.nodes?.find((m) => m.name === name);
}

// An upstream that holds every request until release() answers them all.
function holdingUpstream() {
  const held = [];
  const server = http.createServer((req, res) => held.push(res));
  return {
    held,
    listen: () => new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port))),
    release() {
      for (const res of held.splice(0)) res.end('released');
    },
    close() {
      this.release();
      server.closeAllConnections?.();
      server.close();
    },
  };
}

// A TCP proxy in front of one NATS server that, while held, lets a
// connection's handshake through (INFO, CONNECT, PING/PONG: the node is
// connected) but holds what the server sends once the node made its first
// JetStream request, until release(): a NATS that answers nothing.
function holdingProxy(target) {
  let held = true;
  const conns = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(target, '127.0.0.1');
    const c = { client, upstream, asked: false, buffered: [] };
    conns.add(c);
    let seen = '';
    client.on('data', (d) => {
      if (!c.asked) {
        seen = (seen + d.toString('latin1')).slice(-4096);
        if (seen.includes('$JS.API')) c.asked = true;
      }
      upstream.write(d);
    });
    upstream.on('data', (d) => {
      if (held && c.asked) c.buffered.push(d);
      else client.write(d);
    });
    const end = () => { client.destroy(); upstream.destroy(); conns.delete(c); };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', end);
    upstream.on('close', end);
  });
  return {
    listen: () => new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port))),
    heldConnections: () => [...conns].filter((c) => c.asked).length,
    release() {
      held = false;
      for (const c of conns) for (const d of c.buffered.splice(0)) c.client.write(d);
    },
    close() {
      for (const c of conns) { c.client.destroy(); c.upstream.destroy(); }
      server.close();
    },
  };
}

describe('membership, load and readiness', () => {
  let nats;
  const nodes = [];
  const upstream = holdingUpstream();
  let upstreamPort;
  const extraArgs = ['--egress-allow-cidr', '127.0.0.1/32'];

  before(async () => {
    upstreamPort = await upstream.listen();
    // The servers do not advertise each other: a node reaches NATS through
    // the URLs it was given, proxies included.
    nats = await startNats(3, { args: ['--no_advertise'] });
    for (let i = 1; i <= 2; i++) nodes.push(await startFleetNode(`node${i}`, nats, { extraArgs }));
    await Promise.all(nodes.map(waitReady));
  });

  after(async () => {
    upstream.close();
    for (const n of nodes) await n.stop().catch(() => {});
    await nats?.stop();
  });

  test("a node's load (requests in flight, requests per second, CPU) is in its heartbeat, read on another node", async () => {
    const hold = `export default { async fetch() {
      const r = await fetch('http://127.0.0.1:${upstreamPort}/hold');
      return new Response(await r.text()); } };`;
    await nodes[0].deployOk('busy', hold, { json: true, egress: [{ match: `http://127.0.0.1:${upstreamPort}/*` }] });
    await waitFor(async () => (await nodes[0].control('GET', '/v1/workers/busy')).status === 200, { what: 'busy deployed' });
    // idle: nothing in flight on node 1, as node 2 sees it
    const idle = await waitFor(async () => {
      const m = await member(nodes[1], 'node1');
      return m?.load?.in_flight === 0 ? m : null;
    }, { timeout: 10000, what: 'node 1 idle' });
    assert.equal(typeof idle.load.requests_per_s, 'number');
    assert.equal(typeof idle.load.cpu, 'number');

    const requests = Array.from({ length: 5 }, () => nodes[0].ingress('busy', '/', { timeout: 30000 }));
    await waitFor(() => upstream.held.length === 5, { timeout: 10000, what: 'five requests held upstream' });
    const busy = await waitFor(async () => {
      const m = await member(nodes[1], 'node1');
      return m?.load?.in_flight === 5 ? m : null;
    }, { timeout: 10000, what: 'node 1 with five requests in flight, seen on node 2' });
    assert.equal(busy.alive, true);
    // node 2 serves none of them
    assert.equal((await member(nodes[1], 'node2')).load.in_flight, 0);
    const ctl = await runProcess(EDGECTL, ['--node', `http://127.0.0.1:${nodes[1].controlPort}`,
      '--token-file', path.join(nodes[1].dataDir, 'control.token'), 'fleet']);
    assert.equal(ctl.code, 0, ctl.stderr);
    assert.match(ctl.stdout, /^NAME\s+STATE\s+ALIVE\s+VERSION\s+LISTEN\s+CONTROL\s+HEARTBEAT\s+BEHIND\s+IN FLIGHT\s+REQ\/S\s+CPU$/m);
    assert.match(ctl.stdout, /^node1\s+serving\s+yes\s+\S+\s+\S+\s+\S+\s+[\d.]+ s ago\s+\d+\s+5\s+[\d.]+\s+[\d.]+$/m);

    upstream.release();
    for (const r of await Promise.all(requests)) {
      assert.equal(r.status, 200);
      assert.equal(r.text, 'released');
    }
    const done = await waitFor(async () => {
      const m = await member(nodes[1], 'node1');
      return m?.load?.in_flight === 0 && m.load.requests_per_s > 0 ? m : null;
    }, { timeout: 10000, what: 'node 1 done, its requests counted' });
    // CPU: requests that compute count in cores busy (CPU seconds a second).
    const spin = 'export default { fetch() { let x = 0; for (let i = 0; i < 2e7; i++) x += i % 7; return new Response(String(x)); } };';
    await nodes[0].deployOk('spin', spin, { json: true, limits: { cpu_ms: 5000 } });
    for (let i = 0; i < 10; i++) assert.equal((await nodes[0].ingress('spin', '/', { timeout: 30000 })).status, 200);
    const computed = await waitFor(async () => {
      const m = await member(nodes[1], 'node1');
      return m?.load?.cpu > 0 ? m : null;
    }, { timeout: 10000, what: 'node 1 CPU seen on node 2' });
    console.log(`node 1 as node 2 saw it: busy ${JSON.stringify(busy.load)}, then ${JSON.stringify(done.load)}, `
      + `computing ${JSON.stringify(computed.load)}`);
  });

  test('a drain shows as "draining" in another node\'s GET /v1/fleet while a request is in flight, then "drained"', async () => {
    const node = await startFleetNode('drainer', nats, { extraArgs });
    try {
      await waitReady(node);
      await waitFor(async () => (await node.control('GET', '/v1/workers/busy')).status === 200, { what: 'busy on drainer' });
      await waitFor(async () => (await member(nodes[0], 'drainer'))?.state === 'serving',
        { timeout: 10000, what: 'drainer serving, seen on node 1' });
      // a request held upstream keeps the drain from finishing
      const inflight = node.ingress('busy', '/', { timeout: 30000 }).catch((err) => ({ error: err.message }));
      await waitFor(() => upstream.held.length === 1, { timeout: 10000, what: 'the request held upstream' });
      const d = await node.control('POST', '/v1/node/drain');
      assert.equal(d.status, 202, d.text);
      const draining = await waitFor(async () => {
        const m = await member(nodes[0], 'drainer');
        return m?.state === 'draining' ? m : null;
      }, { timeout: 10000, what: 'drainer draining, seen on node 1' });
      assert.equal(draining.load.in_flight, 1);
      upstream.release();
      const r = await inflight;
      assert.equal(r.status, 200, `the request in flight finished: ${JSON.stringify(r.error ?? r.text)}`);
      assert.equal(r.text, 'released');
      await waitFor(async () => (await member(nodes[0], 'drainer'))?.state === 'drained',
        { timeout: 15000, what: 'drainer drained, seen on node 1' });
      const ctl = await runProcess(EDGECTL, ['--node', `http://127.0.0.1:${nodes[0].controlPort}`,
        '--token-file', path.join(nodes[0].dataDir, 'control.token'), 'fleet']);
      assert.match(ctl.stdout, /^drainer\s+drained\s+yes\s/m);
    } finally {
      await node.stop().catch(() => {});
    }
  });

  test('a node joining with an empty data directory answers /readyz 503 until it holds every record, then 200, and serves them', async () => {
    const N = 30;
    for (let i = 0; i < N; i++) await nodes[i % 2].deployOk(`many${i}`, worker(`many ${i}`));
    // The joining node reaches each server through a proxy that holds the
    // servers' answers once the node is connected.
    const proxies = nats.servers.map((s) => holdingProxy(s.port));
    const ports = await Promise.all(proxies.map((p) => p.listen()));
    const urls = ports.map((p) => `nats://127.0.0.1:${p}`).join(',');
    const node = await startFleetNode('joiner', { urls }, { dataDir: tempDir('edgenode-fleet-join-'), extraArgs });
    try {
      // connected, asking, answered nothing yet: not ready, and none of the
      // fleet's workers here
      await waitFor(async () => (await node.control('GET', '/v1/fleet')).json?.connected === true &&
        proxies.some((p) => p.heldConnections() > 0), { timeout: 10000, what: 'the joiner connected and held' });
      const ready = await node.control('GET', '/readyz', { token: null });
      assert.equal(ready.status, 503, ready.text);
      assert.equal(ready.json.ready, false);
      assert.match(ready.json.error, /^(syncing the fleet's state|the fleet is unreachable and this node has never been in sync)$/);
      assert.equal((await node.control('GET', '/v1/workers')).json.workers.length, 0);
      assert.equal((await node.ingress('many0')).status, 404);

      const released = Date.now();
      for (const p of proxies) p.release();
      // Every answer until 200 is 503; once it is 200 the node has every record.
      let polls = 0;
      for (;;) {
        const r = await node.control('GET', '/readyz', { token: null });
        polls++;
        if (r.status === 200) break;
        assert.equal(r.status, 503, r.text);
        assert.ok(Date.now() - released < 30000, 'the joiner became ready');
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      const list = (await node.control('GET', '/v1/workers')).json.workers.map((w) => w.name);
      for (let i = 0; i < N; i++) assert.ok(list.includes(`many${i}`), `many${i} is on the joiner once it is ready`);
      for (let i = 0; i < N; i += 7) {
        const r = await node.ingress(`many${i}`);
        assert.equal(r.status, 200);
        assert.equal(r.text, `many ${i}`);
      }
      const f = (await node.control('GET', '/v1/fleet')).json;
      assert.equal(f.synced, true);
      assert.equal(f.applied, f.head);
      console.log(`joiner: ready ${Date.now() - released} ms after the servers answered (${polls} polls of /readyz)`);
    } finally {
      await node.stop().catch(() => {});
      for (const p of proxies) p.close();
    }
  });
});

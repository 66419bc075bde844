// Slow clients and connection floods (issue 24, item 3): a trickling body
// gets 408 instead of holding its connection; floods of slow connections
// are capped per address and in total on both listeners, and the
// supervisor keeps descriptors for its own work, so it still restarts a
// killed worker process while its control port is flooded without a token.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';

import { httpRequest, startNode, waitFor, workerList } from './lib/node.mjs';

// A body that trickles one byte every 100 ms on a fresh connection to port;
// resolves with what the server answered once it closes the connection.
function trickle(port, head, { gapMs = 100, maxMs = 20000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: '127.0.0.1' });
    const chunks = [];
    let timer;
    const started = Date.now();
    const finish = (why) => {
      clearInterval(timer);
      sock.destroy();
      resolve({ text: Buffer.concat(chunks).toString('latin1'), why });
    };
    sock.on('connect', () => {
      sock.write(head);
      timer = setInterval(() => {
        if (Date.now() - started > maxMs) finish('still open');
        else sock.write('x');
      }, gapMs);
    });
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', () => {});
    sock.on('close', () => finish('closed'));
  });
}

function statusOf(text) {
  const m = /^HTTP\/1\.1 (\d{3})/.exec(text);
  return m ? Number(m[1]) : 0;
}

function bodyOf(text) {
  const i = text.indexOf('\r\n\r\n');
  return i < 0 ? '' : text.slice(i + 4);
}

// Connections from given loopback addresses, each sending `payload` and then
// nothing: what an attacker holding descriptors does. Counts those the
// server closed (refused at once, or timed out) and those still open.
class Flood {
  constructor(port, payload) {
    this.port = port;
    this.payload = payload;
    this.socks = new Set();
    this.closed = 0;
    this.attempts = 0;
  }

  async open(addresses, perAddress) {
    for (const localAddress of addresses) {
      const batch = [];
      for (let i = 0; i < perAddress; i++) batch.push(this.one(localAddress));
      await Promise.all(batch);
    }
  }

  one(localAddress) {
    this.attempts++;
    return new Promise((resolve) => {
      const sock = net.connect({ port: this.port, host: '127.0.0.1', localAddress });
      this.socks.add(sock);
      sock.on('connect', () => {
        sock.write(this.payload);
        resolve();
      });
      sock.on('error', () => resolve());
      sock.on('close', () => {
        this.socks.delete(sock);
        this.closed++;
        resolve();
      });
    });
  }

  get open_() {
    return this.socks.size;
  }

  stop() {
    for (const s of this.socks) s.destroy();
    this.socks.clear();
  }
}

const addresses = (from, n) => Array.from({ length: n }, (_, i) => `127.0.0.${from + i}`);

const fromAddress = (port, localAddress, host) => new Promise((resolve) => {
  const sock = net.connect({ port, host: '127.0.0.1', localAddress }, () => {
    sock.write(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  });
  const chunks = [];
  sock.on('data', (d) => chunks.push(d));
  sock.on('error', () => {});
  sock.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
});

test('a body slower than the minimum rate gets 408 on the ingress and the control API', async () => {
  const node = await startNode({
    workers: 1, dev: true, extraArgs: ['--body-timeout-ms', '500', '--body-min-rate', '1000'],
  });
  try {
    // One byte every 100 ms is progress, but 10 bytes/s is far below 1000.
    const ingress = await trickle(node.listenPort,
      'POST / HTTP/1.1\r\nHost: hello.localhost\r\nContent-Length: 100000\r\n\r\n');
    assert.equal(ingress.why, 'closed', 'the server closed the connection');
    assert.equal(statusOf(ingress.text), 408, ingress.text);
    assert.match(JSON.parse(bodyOf(ingress.text)).error,
      /^request body timeout: the request body arrived slower than 1000 bytes\/s over 500 ms$/);

    // The same on the control port, for a client without a token: the body
    // is read before the token is checked (it is small enough to buffer).
    const control = await trickle(node.controlPort,
      'PUT /v1/workers/x HTTP/1.1\r\nHost: c\r\nContent-Length: 1000\r\n\r\n');
    assert.equal(statusOf(control.text), 408, control.text);
    assert.match(JSON.parse(bodyOf(control.text)).error, /^request body timeout/);

    // A large body sent at once is not affected: it streams to the worker.
    const big = 'y'.repeat(2 << 20);
    const r = await node.ingress('hello', '/', { method: 'POST', body: big });
    assert.equal(r.status, 200);

    const info = await node.nodeInfo();
    assert.equal(workerList(info)[0].ingress.body_timeouts, 1);
    assert.equal(info.connections.control.body_timeouts, 1);
    assert.equal(info.connections.ingress.body_timeout_ms, 500);
    assert.equal(info.connections.ingress.body_min_rate, 1000);
    const metrics = (await node.control('GET', '/metrics')).text;
    assert.match(metrics, /^edgenode_worker_body_timeouts_total\{worker="1"\} 1$/m);
    assert.match(metrics, /^edgenode_control_body_timeouts_total 1$/m);
  } finally {
    await node.stop();
  }
});

test('the public port flooded from one address: another address is served, and the first once the flood stops', async () => {
  // 1600 descriptors: before the caps, 2000 slow connections used them all
  // up and every new client got an empty reply.
  const node = await startNode({
    workers: 1, dev: true, nofile: 1600,
    extraArgs: ['--max-connections-per-addr', '50', '--body-timeout-ms', '600000',
      '--body-min-rate', '0'],
  });
  const flood = new Flood(node.listenPort,
    'POST / HTTP/1.1\r\nHost: hello.localhost\r\nContent-Length: 50000\r\n\r\n');
  try {
    await flood.open(['127.0.0.2'], 2000);
    await waitFor(async () => {
      const w = workerList(await node.nodeInfo())[0];
      return w.ingress && w.ingress.refused_addr >= 1900;
    }, { timeout: 30000, what: 'the flood to be refused past the per-address cap' });
    // The refusals the worker counted reach this side as closes a little later.
    await waitFor(() => flood.open_ <= 50, {
      timeout: 10000, what: 'at most 50 connections held from one address',
    });

    const other = await fromAddress(node.listenPort, '127.0.0.3', 'hello.localhost');
    assert.equal(statusOf(other), 200, `another address: ${JSON.stringify(other.slice(0, 200))}`);
    // The flooding address itself is refused: its connection is closed at once.
    const same = await fromAddress(node.listenPort, '127.0.0.2', 'hello.localhost');
    assert.equal(same, '');

    flood.stop();
    await waitFor(async () => statusOf(await fromAddress(node.listenPort, '127.0.0.2',
      'hello.localhost')) === 200, { timeout: 10000, what: 'the flooding address to be served again' });

    const info = await node.nodeInfo();
    const ingress = workerList(info)[0].ingress;
    assert.equal(ingress.max_connections_per_addr, 50);
    // RLIMIT_NOFILE 1600 is below twice the worker's reserve of 1024:
    // half of it goes to connections.
    assert.equal(ingress.nofile, 1600);
    assert.equal(ingress.max_connections, 800);
    const metrics = (await node.control('GET', '/metrics')).text;
    const m = /^edgenode_worker_connections_refused_total\{worker="1",reason="addr"\} (\d+)$/m.exec(metrics);
    assert.ok(m && Number(m[1]) >= 1900, metrics);
    assert.match(metrics, /^edgenode_worker_connections_per_addr_limit\{worker="1"\} 50$/m);

    // From many addresses, the total cap holds: the process keeps its
    // reserve and serves again once the flood stops.
    const wide = new Flood(node.listenPort,
      'POST / HTTP/1.1\r\nHost: hello.localhost\r\nContent-Length: 50000\r\n\r\n');
    await wide.open(addresses(10, 25), 40); // 1000: each address below its cap of 50
    await waitFor(async () => workerList(await node.nodeInfo())[0].ingress.refused_cap >= 200,
      { timeout: 30000, what: 'the flood to be refused past the total cap' });
    assert.ok(wide.open_ <= 800, `${wide.open_} connections held`);
    wide.stop();
    await waitFor(async () => (await node.ingress('hello')).status === 200,
      { timeout: 10000, what: 'the node to serve once the flood stops' });
  } finally {
    flood.stop();
    await node.stop();
  }
});

test('the control port flooded without a token: the supervisor still restarts a killed worker process', async () => {
  // 1100 descriptors, control caps as high as they go: the descriptor
  // limit less the supervisor's reserve of 512 is what bounds the flood.
  const node = await startNode({
    workers: 1, dev: true, nofile: 1100,
    extraArgs: ['--control-max-connections', '100000', '--body-timeout-ms', '600000',
      '--body-min-rate', '0'],
  });
  node.allowCrashes = true;
  const before = await node.nodeInfo();
  assert.equal(before.connections.nofile, 1100);
  assert.equal(before.connections.control.max_connections, 588);
  assert.equal(before.connections.control.max_connections_per_addr, 64);
  const oldPid = workerList(before)[0].pid;
  // Bodies without a token, small enough to be read before the token is checked.
  const flood = new Flood(node.controlPort,
    'PUT /v1/workers/x HTTP/1.1\r\nHost: c\r\nContent-Length: 60000\r\n\r\n');
  try {
    await flood.open(addresses(2, 30), 60); // 1800: each address below its cap of 64
    await waitFor(() => flood.closed >= flood.attempts - 588,
      { timeout: 30000, what: 'the flood past the cap to be refused' });
    assert.ok(flood.open_ <= 588, `${flood.open_} control connections held`);

    const from = node.logs.length;
    process.kill(oldPid, 'SIGKILL');
    const spawned = await node.waitForLog((l) => l.json?.msg === 'worker spawned' &&
      l.json.pid !== oldPid, { from, timeout: 20000, what: 'the worker process to be restarted' });
    await waitFor(async () => (await node.ingress('hello')).status === 200,
      { timeout: 20000, what: 'the restarted worker process to serve' });
    assert.equal(node.logsMatching((l) => /too many open files/i.test(l.raw)).length, 0);

    flood.stop();
    const info = await waitFor(async () => {
      const i = await node.nodeInfo();
      return workerList(i)[0].state === 'ready' && i;
    }, { timeout: 20000, what: 'the operator to reach the control API again' });
    assert.equal(workerList(info)[0].pid, spawned.json.pid);
    assert.ok(info.connections.control.refused_cap >= 1000, JSON.stringify(info.connections));
    const metrics = (await node.control('GET', '/metrics')).text;
    const m = /^edgenode_control_connections_refused_total\{reason="cap"\} (\d+)$/m.exec(metrics);
    assert.ok(m && Number(m[1]) >= 1000, metrics);
    assert.match(metrics, /^edgenode_control_connections_limit 588$/m);
    assert.match(metrics, /^edgenode_descriptors_limit 1100$/m);
  } finally {
    flood.stop();
    await node.stop();
  }
});

test('one address flooding the control port leaves room for the operator', async () => {
  const node = await startNode({ workers: 1, extraArgs: ['--control-max-connections-per-addr', '20'] });
  const flood = new Flood(node.controlPort, 'GET /v1/node HTTP/1.1\r\nHost: c\r\n');
  try {
    await flood.open(['127.0.0.2'], 100);
    await waitFor(() => flood.closed >= 80, { timeout: 20000, what: 'the flood to be refused' });
    const r = await httpRequest({
      port: node.controlPort, path: '/v1/node', headers: { authorization: `Bearer ${node.token}` },
    });
    assert.equal(r.status, 200);
    assert.equal(r.json.connections.control.refused_addr, 80);
    assert.equal(r.json.connections.control.max_connections_per_addr, 20);
  } finally {
    flood.stop();
    await node.stop();
  }
});

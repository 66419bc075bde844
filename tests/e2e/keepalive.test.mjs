// Connection handling under load: keep-alive, pipelining, many connections.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { RawConn, parseResponses, rawRequest, startNode } from './lib/node.mjs';

const COUNTER = `
export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname === '/slow') await new Promise((r) => setTimeout(r, 150));
    const body = request.method === 'POST' ? await request.text() : '';
    return new Response(url.pathname + url.search + (body ? ' ' + body : ''));
  }
};
`;

let node;

before(async () => {
  node = await startNode({ workers: 2 });
  // A megabyte body costs more than the default CPU limit on a busy machine.
  await node.deployOk('count', { 'index.js': COUNTER }, { limits: { cpu_ms: 2000 } });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

test('1000 sequential requests on one keep-alive connection', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    for (let i = 0; i < 1000; i++) {
      const res = await conn.request(`GET /n/${i} HTTP/1.1\r\nHost: count.localhost\r\n\r\n`);
      assert.equal(res.status, 200, `request ${i}`);
      assert.equal(res.text, `/n/${i}`, `request ${i}`);
      assert.notEqual((res.headers.connection ?? '').toLowerCase(), 'close', `request ${i} keeps the connection`);
    }
    assert.equal(conn.closed, false, 'still the same open socket');
  } finally {
    conn.close();
  }
});

test('10 pipelined requests in one write come back in order', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    let batch = 'GET /slow?i=0 HTTP/1.1\r\nHost: count.localhost\r\n\r\n';
    for (let i = 1; i < 10; i++) {
      batch += i % 3 === 0
        ? `POST /p?i=${i} HTTP/1.1\r\nHost: count.localhost\r\nContent-Length: 5\r\n\r\nbody${i}`
        : `GET /p?i=${i} HTTP/1.1\r\nHost: count.localhost\r\n\r\n`;
    }
    const pending = [];
    for (let i = 0; i < 10; i++) pending.push(conn.expectOne());
    conn.write(batch);
    const responses = await Promise.all(pending);
    responses.forEach((res, i) => {
      assert.equal(res.status, 200, `response ${i}`);
      const want = i === 0 ? '/slow?i=0' : i % 3 === 0 ? `/p?i=${i} body${i}` : `/p?i=${i}`;
      assert.equal(res.text, want, `response ${i} in order`);
    });
    // the connection is still good afterwards
    const more = await conn.request('GET /after HTTP/1.1\r\nHost: count.localhost\r\n\r\n');
    assert.equal(more.text, '/after');
  } finally {
    conn.close();
  }
});

test('pipelined requests to different workers, with a 404 in the middle', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    const pending = [conn.expectOne(), conn.expectOne(), conn.expectOne()];
    conn.write('GET /a HTTP/1.1\r\nHost: count.localhost\r\n\r\n' +
      'GET /b HTTP/1.1\r\nHost: nobody.localhost\r\n\r\n' +
      'GET /c HTTP/1.1\r\nHost: count.localhost\r\n\r\n');
    const [a, b, c] = await Promise.all(pending);
    assert.equal(a.text, '/a');
    assert.equal(b.status, 404);
    assert.equal(c.text, '/c');
  } finally {
    conn.close();
  }
});

test('200 concurrent connections, one request each', async () => {
  const conns = [];
  try {
    for (let i = 0; i < 200; i++) conns.push(new RawConn(node.listenPort));
    await Promise.all(conns.map((c) => c.connect()));
    const results = await Promise.all(conns.map((c, i) =>
      c.request(`GET /c/${i} HTTP/1.1\r\nHost: count.localhost\r\n\r\n`)));
    const ok = results.filter((r, i) => r.status === 200 && r.text === `/c/${i}`).length;
    assert.equal(ok, 200, 'all 200 answered correctly');
  } finally {
    for (const c of conns) c.close();
  }
});

test('200 concurrent first requests to a worker just deployed', async () => {
  await node.deployOk('fresh', `export default { fetch(r) { return new Response('fresh ' + new URL(r.url).pathname); } };\n`);
  const conns = [];
  try {
    for (let i = 0; i < 200; i++) conns.push(new RawConn(node.listenPort));
    await Promise.all(conns.map((c) => c.connect()));
    const results = await Promise.all(conns.map((c, i) =>
      c.request(`GET /${i} HTTP/1.1\r\nHost: fresh.localhost\r\n\r\n`)));
    const bad = results.map((r, i) => [i, r.status, r.text]).filter(([i, s, t]) => s !== 200 || t !== `fresh /${i}`);
    assert.deepEqual(bad, [], 'every one answered by the new worker');
  } finally {
    for (const c of conns) c.close();
  }
});

test('Connection: close and HTTP/1.0 close after the response', async () => {
  const r = await rawRequest(node.listenPort,
    'GET /close HTTP/1.1\r\nHost: count.localhost\r\nConnection: close\r\n\r\n', { timeout: 3000 });
  assert.ok(r.closed, 'closed by the server');
  const [res] = parseResponses(r.data, { eof: true }).responses;
  assert.equal(res.text, '/close');
  assert.equal(res.headers.connection?.toLowerCase(), 'close');

  const r10 = await rawRequest(node.listenPort, 'GET /ten HTTP/1.0\r\nHost: count.localhost\r\n\r\n', { timeout: 3000 });
  assert.ok(r10.closed, 'HTTP/1.0 without keep-alive is closed');
  const [res10] = parseResponses(r10.data, { eof: true }).responses;
  assert.equal(res10.status, 200);
  assert.equal(res10.text, '/ten');
});

test('1 MiB request body', async () => {
  const big = 'q'.repeat(1024 * 1024);
  const res = await node.ingress('count', '/big', { method: 'POST', body: big });
  assert.equal(res.status, 200);
  assert.equal(res.text.length, '/big '.length + big.length);
});

// Streamed bodies. A worker that returns a ReadableStream still being produced
// sends its head at once and each chunk as it comes (chunked transfer
// coding), with back-pressure, and a stream that fails after the head cuts the
// connection rather than ending the body as if it were whole. A large or
// chunked request body reaches request.body as it arrives.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import net from 'node:net';
import { after, before, test } from 'node:test';
import { RawConn, getRequest, parseOne, rawRequest, startNode } from './lib/node.mjs';

// One worker process: /release reaches the same isolate as /gated.
const STREAMER = `
const enc = new TextEncoder();
let release = null;
let cancelled = 0;

function gated() {
  let step = 0;
  return new ReadableStream({
    async pull(c) {
      if (step === 0) { c.enqueue(enc.encode('first;')); step++; return; }
      await new Promise((r) => { release = r; });
      c.enqueue(enc.encode('second;'));
      c.close();
    },
  });
}

export default {
  async fetch(request) {
    const url = new URL(request.url);
    const n = Number(url.searchParams.get('n') ?? 4);
    switch (url.pathname) {
      case '/gated': return new Response(gated(), { headers: { 'content-type': 'text/plain' } });
      case '/release': {
        const had = release !== null;
        if (had) release();
        release = null;
        return new Response(had ? 'released' : 'nothing waits');
      }
      case '/big': {
        // n chunks of 64 KiB, each filled with its index: the client checks the hash.
        let i = 0;
        return new Response(new ReadableStream({
          pull(c) {
            if (i < n) c.enqueue(new Uint8Array(65536).fill(i++ & 255));
            else c.close();
          },
        }));
      }
      case '/ticks': {
        let i = 0;
        return new Response(new ReadableStream({
          async pull(c) {
            await scheduler.wait(1);
            if (i < n) c.enqueue(enc.encode('tick ' + i++ + '\\n'));
            else c.close();
          },
        }));
      }
      case '/fails': {
        let i = 0;
        return new Response(new ReadableStream({
          async pull(c) {
            await scheduler.wait(1);
            if (i++ < 2) c.enqueue(enc.encode('part;'));
            else c.error(new Error('the upstream broke'));
          },
        }));
      }
      case '/strings': {
        return new Response(new ReadableStream({
          async pull(c) { await scheduler.wait(1); c.enqueue('not bytes'); c.close(); },
        }));
      }
      case '/spin': {
        let i = 0;
        return new Response(new ReadableStream({
          async pull(c) {
            await scheduler.wait(1);
            if (i++ === 0) { c.enqueue(enc.encode('before the loop;')); return; }
            for (;;) {}
          },
        }));
      }
      case '/endless': {
        return new Response(new ReadableStream({
          async pull(c) { await scheduler.wait(1); c.enqueue(new Uint8Array(16384)); },
          cancel() { cancelled++; },
        }));
      }
      case '/cancelled': return new Response(String(cancelled));
      case '/count': {
        let bytes = 0;
        let pieces = 0;
        const hash = [];
        for await (const piece of request.body) {
          bytes += piece.length;
          pieces++;
          if (pieces === 1) hash.push(piece[0]);
        }
        return Response.json({ bytes, pieces, first: hash[0] ?? null });
      }
      case '/echo': return new Response(request.body);
      case '/first-piece': {
        // Answers from the first piece: the client is still sending the rest.
        const reader = request.body.getReader();
        const { value } = await reader.read();
        return new Response('first piece of ' + value.length + ' bytes');
      }
      case '/read-error': {
        try {
          await request.arrayBuffer();
          return new Response('read it all');
        } catch (err) {
          return new Response(err.name + ': ' + err.message, { status: 413 });
        }
      }
      case '/fixed': case '/fixed-short': {
        // A FixedLengthStream announces its length: n ticks of 7 bytes, one
        // fewer than announced for /fixed-short.
        const { readable, writable } = new FixedLengthStream(7 * n);
        (async () => {
          const writer = writable.getWriter();
          const count = url.pathname === '/fixed' ? n : n - 1;
          for (let i = 0; i < count; i++) {
            await scheduler.wait(1);
            await writer.write(enc.encode('tick ' + (i % 10) + ';'));
          }
          await writer.close();
        })().catch(() => {});
        return new Response(readable);
      }
      case '/complete': {
        // Everything is queued before the response goes: one piece, with a length.
        return new Response(new ReadableStream({
          start(c) { c.enqueue(enc.encode('all at once')); c.close(); },
        }));
      }
      default: return new Response('ok');
    }
  },
};
`;

let node;

before(async () => {
  node = await startNode({ workers: 1 });
  // Room for the sanitizer build on a busy machine; /spin still runs into it.
  await node.deployOk('stream', { 'index.js': STREAMER }, { limits: { cpu_ms: 300 } });
  // Filling 16 MiB takes more CPU than the spin test's tight limit allows.
  await node.deployOk('bulk', { 'index.js': STREAMER }, { limits: { cpu_ms: 5000 } });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

const HOST = 'stream.localhost';

test('the head and the first chunk arrive while the stream is still open', async () => {
  let sawFirst;
  const first = new Promise((resolve) => { sawFirst = resolve; });
  const pending = rawRequest(node.listenPort, getRequest(HOST, '/gated', 'Connection: close\r\n'), {
    timeout: 10000,
    onData: (buf) => { if (buf.includes('first;')) sawFirst(buf); },
  });
  const early = await first;
  // The body is not over: the worker waits for /release before its second chunk.
  assert.equal(parseOne(early), null, 'the response is incomplete before the release');
  const head = early.toString('latin1');
  assert.match(head, /^HTTP\/1\.1 200 OK\r\n/);
  assert.match(head, /\r\ntransfer-encoding: chunked\r\n/i);
  assert.doesNotMatch(head, /\r\ncontent-length:/i);
  const rel = await node.ingress('stream', '/release');
  assert.equal(rel.text, 'released');
  const res = await pending;
  const parsed = parseOne(res.data, { eof: true });
  assert.equal(parsed.response.text, 'first;second;');
});

test('a streamed response keeps the connection alive for the next request', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    const a = await conn.request(getRequest(HOST, '/ticks?n=5'));
    assert.equal(a.status, 200);
    assert.equal(a.text, 'tick 0\ntick 1\ntick 2\ntick 3\ntick 4\n');
    const b = await conn.request(getRequest(HOST, '/'));
    assert.equal(b.text, 'ok');
    assert.equal(conn.closed, false);
  } finally {
    conn.close();
  }
});

// Reads one response to the end, pausing the socket now and then so that
// the worker has to wait for the client to catch up.
function slowRead(port, request) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let received = 0;
    const sock = net.connect({ port, host: '127.0.0.1' }, () => sock.write(request));
    sock.on('data', (d) => {
      chunks.push(d);
      received += d.length;
      if (chunks.length % 16 === 0) {
        sock.pause();
        setTimeout(() => sock.resume(), 10);
      }
    });
    sock.on('error', reject);
    sock.on('close', () => resolve(Buffer.concat(chunks, received)));
  });
}

test('16 MiB streamed to a client that reads slowly arrive whole', async () => {
  const n = 256;
  const expected = createHash('sha256');
  for (let i = 0; i < n; i++) expected.update(Buffer.alloc(65536, i & 255));
  const data = await slowRead(node.listenPort, getRequest('bulk.localhost', `/big?n=${n}`, 'Connection: close\r\n'));
  const parsed = parseOne(data, { eof: true });
  assert.ok(parsed, `a complete response (got ${data.length} bytes)\n${node.dumpLogs(5)}`);
  assert.equal(parsed.response.body.length, n * 65536);
  assert.equal(createHash('sha256').update(parsed.response.body).digest('hex'), expected.digest('hex'));
});

test('an HTTP/1.0 client gets the body unframed, ended by the close', async () => {
  const res = await rawRequest(node.listenPort, 'GET /ticks?n=3 HTTP/1.0\r\nHost: stream.localhost\r\n\r\n', { timeout: 10000 });
  assert.equal(res.closed, true);
  const parsed = parseOne(res.data, { eof: true });
  assert.equal(parsed.response.status, 200);
  assert.equal(parsed.response.headers['transfer-encoding'], undefined);
  assert.equal(parsed.response.headers.connection, 'close');
  assert.equal(parsed.response.text, 'tick 0\ntick 1\ntick 2\n');
});

test('HEAD gets the head only', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    const head = await conn.request(`HEAD /ticks?n=3 HTTP/1.1\r\nHost: ${HOST}\r\n\r\n`, { isHead: true });
    assert.equal(head.status, 200);
    assert.equal(head.body.length, 0);
    const next = await conn.request(getRequest(HOST, '/'));
    assert.equal(next.text, 'ok', 'nothing of the HEAD body leaked into the connection');
  } finally {
    conn.close();
  }
});

test('a stream that fails after the head cuts the connection and is logged', async () => {
  const from = node.logs.length;
  const res = await rawRequest(node.listenPort, getRequest(HOST, '/fails'), { timeout: 10000 });
  assert.equal(res.closed, true);
  assert.match(res.text, /^HTTP\/1\.1 200 OK/);
  assert.equal(res.text.match(/part;/g)?.length, 2, 'the chunks produced before the failure were sent');
  assert.ok(!res.text.endsWith('0\r\n\r\n'), 'no terminating chunk: the client can tell the body is cut');
  const line = await node.waitForLog((l) => /response body failed/.test(l.json?.msg ?? ''), { from });
  assert.equal(line.json.tenant, 'stream');
  assert.match(line.json.msg, /the upstream broke/);
  assert.ok(line.json.request_id);
});

test('a chunk that is not bytes fails the stream with a clear log line', async () => {
  const from = node.logs.length;
  const res = await rawRequest(node.listenPort, getRequest(HOST, '/strings'), { timeout: 10000 });
  assert.equal(res.closed, true);
  const line = await node.waitForLog((l) => /response body failed/.test(l.json?.msg ?? ''), { from });
  assert.match(line.json.msg, /string chunk where bytes were expected/);
});

test('the CPU limit still applies while streaming, and the isolate serves on', async () => {
  const res = await rawRequest(node.listenPort, getRequest(HOST, '/spin'), { timeout: 10000 });
  assert.equal(res.closed, true);
  assert.ok(res.text.includes('before the loop;'));
  assert.ok(!res.text.endsWith('0\r\n\r\n'));
  const after = await node.ingress('stream', '/');
  assert.equal(after.status, 200);
  assert.equal(after.text, 'ok');
});

test('a client that leaves mid-stream cancels the stream', async () => {
  const before = Number((await node.ingress('stream', '/cancelled')).text);
  await rawRequest(node.listenPort, getRequest(HOST, '/endless'), {
    timeout: 10000,
    onData: (buf, sock) => { if (buf.length > 100000) sock.destroy(); },
  });
  let now = before;
  for (let i = 0; i < 200 && now === before; i++) {
    await new Promise((r) => setTimeout(r, 25));
    now = Number((await node.ingress('stream', '/cancelled')).text);
  }
  assert.equal(now, before + 1, 'the stream\'s cancel() ran once');
});

test('a stream complete before the response goes out is sent with a Content-Length', async () => {
  const res = await node.ingress('stream', '/complete');
  assert.equal(res.text, 'all at once');
  assert.equal(res.headers['content-length'], '11');
  assert.equal(res.headers['transfer-encoding'], undefined);
});

test('a FixedLengthStream body goes out with its Content-Length, unchunked, and keeps the connection', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    const res = await conn.request(getRequest(HOST, '/fixed?n=5'));
    assert.equal(res.status, 200);
    assert.equal(res.headers['content-length'], '35');
    assert.equal(res.headers['transfer-encoding'], undefined);
    assert.equal(res.text, 'tick 0;tick 1;tick 2;tick 3;tick 4;');
    const next = await conn.request(getRequest(HOST, '/'));
    assert.equal(next.text, 'ok');
    assert.equal(conn.closed, false);
  } finally {
    conn.close();
  }
  // HTTP/1.0 clients get the length too, so they need no close to find the end.
  const old = await rawRequest(node.listenPort, 'GET /fixed?n=2 HTTP/1.0\r\nHost: stream.localhost\r\n\r\n', { timeout: 10000 });
  const parsed = parseOne(old.data, { eof: true });
  assert.equal(parsed.response.headers['content-length'], '14');
  assert.equal(parsed.response.text, 'tick 0;tick 1;');
});

test('a FixedLengthStream that ends short cuts the connection: the client never sees a whole body', async () => {
  const from = node.logs.length;
  const res = await rawRequest(node.listenPort, getRequest(HOST, '/fixed-short?n=3'), { timeout: 10000 });
  assert.equal(res.closed, true);
  assert.match(res.text, /^HTTP\/1\.1 200 OK/);
  assert.match(res.text, /\r\ncontent-length: 21\r\n/i);
  assert.equal(parseOne(res.data, { eof: true }), null, 'the body is shorter than announced');
  const line = await node.waitForLog((l) => /response body failed/.test(l.json?.msg ?? ''), { from });
  assert.match(line.json.msg, /FixedLengthStream did not see all expected bytes/);
  const after = await node.ingress('stream', '/');
  assert.equal(after.text, 'ok');
});

// A chunked request body, written piece by piece by the client.
function chunkedRequest(host, path, pieces) {
  const head = `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\n`;
  const body = pieces.map((p) => Buffer.concat([Buffer.from(p.length.toString(16) + '\r\n'), p, Buffer.from('\r\n')]));
  return [Buffer.from(head), ...body, Buffer.from('0\r\n\r\n')];
}

test('a large request body reaches request.body as it arrives, and the connection serves on', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    const body = Buffer.alloc(3 * 1024 * 1024 + 17, 7);
    const res = await conn.request(Buffer.concat([
      Buffer.from(`POST /count HTTP/1.1\r\nHost: bulk.localhost\r\nContent-Length: ${body.length}\r\n\r\n`), body]));
    assert.equal(res.status, 200);
    assert.equal(res.json?.bytes ?? JSON.parse(res.text).bytes, body.length);
    assert.ok(JSON.parse(res.text).pieces > 1, 'read in several pieces');
    const next = await conn.request(getRequest('bulk.localhost', '/'));
    assert.equal(next.text, 'ok');
  } finally {
    conn.close();
  }
});

test('a chunked request body echoed back arrives byte for byte', async () => {
  const pieces = [];
  for (let i = 0; i < 64; i++) pieces.push(Buffer.alloc(30000 + i, i));
  const expected = Buffer.concat(pieces);
  const res = await rawRequest(node.listenPort, chunkedRequest('bulk.localhost', '/echo', pieces), { timeout: 20000 });
  const parsed = parseOne(res.data, { eof: true });
  assert.ok(parsed, 'a complete response');
  assert.equal(parsed.response.status, 200);
  assert.ok(parsed.response.body.equals(expected));
});

test('a worker can answer before the request body is complete; the connection then closes', async () => {
  let answered;
  const gotAnswer = new Promise((resolve) => { answered = resolve; });
  const parts = [Buffer.from(`POST /first-piece HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 5000000\r\n\r\n`), Buffer.alloc(70000, 1)];
  const res = await rawRequest(node.listenPort, parts, {
    timeout: 10000,
    onData: (buf) => { if (parseOne(buf, { eof: false })) answered(); },
  });
  await gotAnswer;
  const parsed = parseOne(res.data, { eof: true });
  assert.equal(parsed.response.status, 200);
  assert.match(parsed.response.text, /^first piece of \d+ bytes$/);
  assert.equal(parsed.response.headers.connection, 'close');
  assert.equal(res.closed, true);
});

test('a chunked body that grows over the limit gets 413 from the node, and the worker a clear error', async () => {
  const from = node.logs.length;
  const piece = Buffer.alloc(1024 * 1024, 3);
  const pieces = Array.from({ length: 11 }, () => piece);
  const res = await rawRequest(node.listenPort, chunkedRequest('bulk.localhost', '/read-error', pieces), { timeout: 20000 });
  const parsed = parseOne(res.data, { eof: true });
  assert.equal(parsed.response.status, 413);
  assert.match(JSON.parse(parsed.response.text).error, /request body/);
  assert.equal(res.closed, true, 'the rest of the body is never read: the connection closes');
  // The worker's own answer (it caught the read error) goes nowhere; it keeps serving.
  const ok = await node.ingress('bulk', '/');
  assert.equal(ok.text, 'ok');
  assert.equal(node.logs.slice(from).filter((l) => /uncaught/.test(l.json?.msg ?? '')).length, 0);
});

test('a client that leaves mid-body fails the read; the worker serves on', async () => {
  const from = node.logs.length;
  const res = await rawRequest(node.listenPort,
    [Buffer.from(`POST /read-error HTTP/1.1\r\nHost: ${HOST}\r\nContent-Length: 5000000\r\n\r\n`), Buffer.alloc(100000, 2)],
    { timeout: 300, endWrite: true });
  assert.equal(parseOne(res.data, { eof: false }), null, 'no response to a request the client abandoned');
  const ok = await node.ingress('stream', '/');
  assert.equal(ok.text, 'ok');
  assert.equal(node.logs.slice(from).filter((l) => l.json?.level === 'error' && /uncaught/.test(l.json?.msg ?? '')).length, 0);
});

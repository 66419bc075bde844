// The ingress path: routing by Host, what the worker sees of a request, what
// the client sees of the worker's Response, and every kind of bad input.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { RawConn, parseResponses, rawRequest, sleep, startNode, waitFor } from './lib/node.mjs';

// The node runs with a 1 s header timeout and a 1 MiB body limit, so that
// reaching them is quick and cheap (the flags are part of what is tested:
// without them the node does not start).
const HEADER_TIMEOUT_MS = 1000;
const MAX_BODY = 1024 * 1024;

const ECHO = `
export default {
  async fetch(request, env, ctx) {
    const headers = {};
    for (const [k, v] of request.headers) headers[k] = v;
    const body = await request.text();
    return Response.json({
      method: request.method,
      url: request.url,
      headers,
      bodyLength: body.length,
      body: body.length > 4096 ? body.slice(0, 64) : body,
    });
  }
};
`;

const SHAPES = `
const enc = new TextEncoder();
export default {
  fetch(request) {
    const path = new URL(request.url).pathname;
    switch (path) {
      case '/string': return new Response('text body');
      case '/unicode': return new Response('h\\u00e9llo \\u2713');
      case '/arraybuffer': return new Response(enc.encode('from arraybuffer').buffer);
      case '/uint8': return new Response(new Uint8Array([117, 105, 110, 116, 56]));
      case '/binary': {
        const b = new Uint8Array(256);
        for (let i = 0; i < 256; i++) b[i] = i;
        return new Response(b, { headers: { 'content-type': 'application/octet-stream' } });
      }
      case '/json': return Response.json({ a: 1, list: [true, null, 'x'] });
      case '/json-status': return Response.json({ created: true }, { status: 201, headers: { 'x-json': 'yes' } });
      case '/status': return new Response('teapot', { status: 418, headers: { 'x-one': '1', 'X-Two': 'two' } });
      case '/redirect': return new Response(null, { status: 302, headers: { location: '/elsewhere' } });
      case '/multi': {
        const h = new Headers();
        h.append('x-multi', 'a');
        h.append('x-multi', 'b');
        return new Response('multi', { headers: h });
      }
      case '/no-content': return new Response(null, { status: 204 });
      case '/empty': return new Response();
      case '/big': return new Response('x'.repeat(2 * 1024 * 1024));
      case '/custom-type': return new Response('<p>hi</p>', { headers: { 'content-type': 'text/html; charset=utf-8' } });
      default: return new Response('not here', { status: 404 });
    }
  }
};
`;

const CRASH = `
function explodeHere() {
  throw new Error('kaboom-7319');
}
export default {
  async fetch(request) {
    const path = new URL(request.url).pathname;
    switch (path) {
      case '/throw': explodeHere(); break;
      case '/throw-sync': return (() => { throw new RangeError('sync-range-1234'); })();
      case '/reject': return Promise.reject(new TypeError('rejected-4242'));
      case '/async-throw': await null; throw new Error('async-boom-5150');
      case '/throw-string': throw 'a bare string 8080';
      case '/number': return 42;
      case '/string': return 'not a response';
      case '/undefined': return undefined;
      case '/object': return { status: 200, body: 'looks like one' };
      case '/ok': return new Response('still fine');
    }
    return new Response('?', { status: 404 });
  }
};
`;

// sync handler (not async) for returns that are not promises
const CRASH_SYNC = `
export default {
  fetch(request) {
    const path = new URL(request.url).pathname;
    if (path === '/number') return 42;
    if (path === '/null') return null;
    if (path === '/throw') throw new Error('sync-throw-9090');
    return new Response('sync ok');
  }
};
`;

const EVAL = `
export default {
  fetch() {
    const out = [];
    try { out.push('eval allowed: ' + eval('1 + 1')); }
    catch (e) { out.push('eval ' + e.constructor.name + ' ' + (e instanceof EvalError) + ' ' + (e.message.length > 0)); }
    try { out.push('Function allowed: ' + new Function('return 2')()); }
    catch (e) { out.push('Function ' + e.constructor.name + ' ' + (e instanceof EvalError) + ' ' + (e.message.length > 0)); }
    return new Response(out.join('\\n'));
  }
};
`;

const LOGGER = `
export default {
  async fetch(request, env, ctx) {
    console.log('console-marker-111', { a: 1 });
    console.error('console-error-222');
    ctx.waitUntil(new Promise((resolve) => setTimeout(() => {
      console.log('waituntil-marker-333');
      resolve();
    }, 100)));
    return new Response('logged');
  }
};
`;

const GLOBALS = `
export default {
  async fetch() {
    const checks = {
      URL: () => new URL('/p?q=1', 'http://x.test').searchParams.get('q') === '1',
      URLSearchParams: () => new URLSearchParams('a=1&b=2').get('b') === '2',
      Headers: () => new Headers({ 'X-A': '1' }).get('x-a') === '1',
      Request: () => new Request('http://x.test/a', { method: 'POST' }).method === 'POST',
      TextEncoder: () => new TextEncoder().encode('\u00e9').length === 2,
      TextDecoder: () => new TextDecoder().decode(new Uint8Array([0xc3, 0xa9])) === '\u00e9',
      atob: () => atob('aGk=') === 'hi',
      btoa: () => btoa('hi') === 'aGk=',
      getRandomValues: () => crypto.getRandomValues(new Uint8Array(8)).length === 8,
      randomUUID: () => /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/.test(crypto.randomUUID()),
      structuredClone: () => structuredClone({ a: [1, { b: 2 }] }).a[1].b === 2,
      queueMicrotask: () => new Promise((r) => queueMicrotask(() => r(true))),
      clearTimeout: () => new Promise((r) => {
        const t = setTimeout(() => r(false), 10);
        clearTimeout(t);
        setTimeout(() => r(true), 30);
      }),
      console: () => typeof console.log === 'function',
    };
    const out = {};
    for (const [k, f] of Object.entries(checks)) {
      try { out[k] = await f(); } catch (e) { out[k] = String(e); }
    }
    return Response.json(out);
  }
};
`;

// Parses its own URL, as most workers do: a Host that made request.url
// invalid would throw here and count as the tenant's uncaught error.
const URLW = `
export default {
  fetch(request) {
    const u = new URL(request.url);
    return Response.json({ url: request.url, host: u.host, hostname: u.hostname, port: u.port,
                           pathname: u.pathname, search: u.search, hostHeader: request.headers.get('host') });
  }
};
`;

let node;
let slowClient; // started in before() so its wait overlaps the other tests

// Dribbles a byte now and then: the limit is on the whole header block, not idle time.
function startSlowClient() {
  const parts = ['GET / HTTP/1.1\r\nHost: hello.localhost\r\nX-Slow: '];
  for (let i = 0; i < (HEADER_TIMEOUT_MS + 4000) / 250; i++) parts.push('a');
  return rawRequest(node.listenPort, parts, { gap: 250, timeout: HEADER_TIMEOUT_MS + 5000 });
}

before(async () => {
  const extraArgs = ['--header-timeout-ms', String(HEADER_TIMEOUT_MS), '--max-body-mb', '1'];
  node = await startNode({ workers: 2, extraArgs });
  // These tests are about HTTP, not the CPU limit: megabyte bodies cost echo
  // and shapes 10-20 ms of CPU on an idle machine and over 40 on a busy one.
  const roomy = { limits: { cpu_ms: 2000 } };
  await node.deployOk('hello', { 'index.js': `export default { fetch() { return new Response('hello from hello'); } };\n` }, roomy);
  for (const [name, source] of Object.entries({
    echo: ECHO, urlw: URLW, shapes: SHAPES, crash: CRASH, crashsync: CRASH_SYNC, evil: EVAL, logger: LOGGER, globals: GLOBALS,
  })) await node.deployOk(name, { 'index.js': source }, roomy);
  slowClient = startSlowClient();
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

function expectJson500(res, what) {
  assert.equal(res.status, 500, `${what}: ${res.status} ${res.text}`);
  assert.match(res.headers['content-type'] ?? '', /application\/json/, `${what}: content type`);
  assert.ok(res.json, `${what}: JSON body: ${res.text}`);
  assert.equal(typeof res.json.error, 'string', `${what}: error member: ${res.text}`);
  assert.equal(typeof res.json.request_id, 'string', `${what}: request_id member: ${res.text}`);
  assert.ok(res.json.request_id.length > 0);
  return res.json;
}

test('routing by the first label of Host', async () => {
  for (const host of ['hello.localhost', 'hello.edge.example.com', `hello.localhost:${node.listenPort}`, 'hello']) {
    const r = await node.ingress(null, '/', { host });
    assert.equal(r.status, 200, `Host: ${host}: ${r.status} ${r.text}`);
    assert.equal(r.text, 'hello from hello', `Host: ${host}`);
  }
  const e = await node.ingress(null, '/', { host: 'echo.example.org' });
  assert.equal(e.json?.method, 'GET', 'another worker by its own name');
});

test('unknown worker -> 404 JSON naming it', async () => {
  const r = await node.ingress('nosuchworker', '/x');
  assert.equal(r.status, 404, r.text);
  assert.match(r.headers['content-type'] ?? '', /application\/json/);
  assert.equal(typeof r.json?.error, 'string', r.text);
  assert.ok(JSON.stringify(r.json).includes('nosuchworker'), `names the worker: ${r.text}`);

  const bad = await node.ingress(null, '/', { host: 'Not_A_Name.localhost' });
  assert.ok(bad.status === 404 || bad.status === 400, `invalid name in Host: ${bad.status} ${bad.text}`);
});

test('a request without Host is refused cleanly', async () => {
  const r = await rawRequest(node.listenPort, 'GET / HTTP/1.1\r\nConnection: close\r\n\r\n', { timeout: 3000 });
  assert.match(r.text, /^HTTP\/1\.1 4\d\d /, `no Host: ${r.text.slice(0, 120)}`);
});

test('the worker sees method, url, headers and body', async () => {
  const r = await node.ingress('echo', '/path/x?q=1&r=two', {
    method: 'POST',
    headers: { 'X-Custom': 'Value 1', 'content-type': 'text/plain' },
    body: 'hello body',
  });
  assert.equal(r.status, 200, r.text);
  assert.match(r.headers['content-type'] ?? '', /application\/json/);
  const seen = r.json;
  assert.equal(seen.method, 'POST');
  const url = new URL(seen.url);
  assert.equal(url.protocol, 'http:');
  assert.equal(url.hostname, 'echo.localhost');
  assert.equal(url.pathname, '/path/x');
  assert.equal(url.search, '?q=1&r=two');
  assert.equal(seen.headers['x-custom'], 'Value 1');
  assert.equal(seen.headers['content-type'], 'text/plain');
  assert.equal(seen.headers.host, 'echo.localhost');
  assert.equal(seen.body, 'hello body');

  for (const method of ['PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
    const m = await node.ingress('echo', '/', { method, body: method === 'DELETE' ? undefined : 'x' });
    assert.equal(m.json?.method, method);
  }
});

test('Content-Length body, large', async () => {
  // as large as the configured maximum allows
  const big = 'b'.repeat(MAX_BODY - 1024);
  const r = await node.ingress('echo', '/', { method: 'POST', body: big });
  assert.equal(r.status, 200, r.text.slice(0, 200));
  assert.equal(r.json.bodyLength, big.length);
});

test('Content-Length body (raw)', async () => {
  const r = await rawRequest(node.listenPort,
    'POST /cl HTTP/1.1\r\nHost: echo.localhost\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello there');
  const [res] = parseResponses(r.data, { eof: true }).responses;
  assert.equal(res?.status, 200, r.text);
  assert.equal(JSON.parse(res.text).body, 'hello there');
});

test('chunked request body, sent in pieces', async () => {
  const r = await rawRequest(node.listenPort, [
    'POST /chunked HTTP/1.1\r\nHost: echo.localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n',
    '3\r\nhel\r\n',
    '3\r\nlo \r\n7\r\nchunked\r\n',
    '0\r\n\r\n',
  ], { gap: 30 });
  const [res] = parseResponses(r.data, { eof: true }).responses;
  assert.equal(res?.status, 200, r.text);
  const seen = JSON.parse(res.text);
  assert.equal(seen.body, 'hello chunked');
  assert.equal(seen.bodyLength, 13);
});

test('Expect: 100-continue', async () => {
  let sentBody = false;
  const r = await rawRequest(node.listenPort,
    'POST /expect HTTP/1.1\r\nHost: echo.localhost\r\nContent-Length: 9\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n',
    {
      timeout: 5000,
      onData: (all, sock) => {
        if (!sentBody && all.toString('latin1').startsWith('HTTP/1.1 100 Continue\r\n')) {
          sentBody = true;
          sock.write('continued');
        }
      },
    });
  assert.ok(sentBody, `100 Continue came first: ${JSON.stringify(r.text.slice(0, 200))}`);
  const { responses } = parseResponses(r.data, { eof: true });
  assert.equal(responses[0].status, 100);
  assert.equal(responses[1]?.status, 200, r.text);
  assert.equal(JSON.parse(responses[1].text).body, 'continued');
});

test('Expect: 100-continue with a body over the maximum -> 413, no 100', async () => {
  const r = await rawRequest(node.listenPort,
    'POST / HTTP/1.1\r\nHost: echo.localhost\r\nContent-Length: 100000000000\r\nExpect: 100-continue\r\n\r\n',
    { timeout: 3000 });
  assert.match(r.text, /^HTTP\/1\.1 413 /, r.text.slice(0, 200));
  assert.ok(!r.text.includes('100 Continue'));
});

test('body over the maximum -> 413 and close, without reading it all', async () => {
  // Declared length: refused right after the head; we never send the body.
  const r = await rawRequest(node.listenPort,
    'POST / HTTP/1.1\r\nHost: echo.localhost\r\nContent-Length: 100000000000\r\n\r\nsome of it',
    { timeout: 3000 });
  assert.match(r.text, /^HTTP\/1\.1 413 /, r.text.slice(0, 200));
  assert.ok(r.closed, 'server closed the connection');
  assert.ok(r.ms < 2500, `answered promptly (${r.ms} ms)`);
  const [res] = parseResponses(r.data, { eof: true }).responses;
  assert.equal(typeof JSON.parse(res.text).error, 'string');

  // Chunked: refused as soon as a chunk size takes it over the limit.
  const c = await rawRequest(node.listenPort,
    'POST / HTTP/1.1\r\nHost: echo.localhost\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFF\r\nabc',
    { timeout: 3000 });
  assert.match(c.text, /^HTTP\/1\.1 413 /, c.text.slice(0, 200));
  assert.ok(c.closed, 'server closed the connection');
});

test('chunked body that grows over the configured maximum -> 413', async () => {
  const chunk = `4000\r\n${'c'.repeat(0x4000)}\r\n`;
  const parts = ['POST / HTTP/1.1\r\nHost: echo.localhost\r\nTransfer-Encoding: chunked\r\n\r\n'];
  for (let i = 0; i < MAX_BODY / 0x4000 + 8; i++) parts.push(chunk); // 16 KiB pieces, 128 KiB too many
  const r = await rawRequest(node.listenPort, parts, { timeout: 5000, gap: 1 });
  assert.match(r.text, /^HTTP\/1\.1 413 /, r.text.slice(0, 200));
  assert.ok(r.closed);
});

test('header block over 64 KiB -> 431', async () => {
  const one = await rawRequest(node.listenPort,
    `GET / HTTP/1.1\r\nHost: echo.localhost\r\nX-Big: ${'a'.repeat(70 * 1024)}\r\n\r\n`, { timeout: 3000 });
  assert.match(one.text, /^HTTP\/1\.1 431 /, one.text.slice(0, 200));
  assert.ok(one.closed);

  let many = 'GET / HTTP/1.1\r\nHost: echo.localhost\r\n';
  for (let i = 0; i < 2000; i++) many += `X-H${i}: ${'v'.repeat(30)}\r\n`;
  const two = await rawRequest(node.listenPort, `${many}\r\n`, { timeout: 3000 });
  assert.match(two.text, /^HTTP\/1\.1 431 /, two.text.slice(0, 200));

  // just under the limit is fine
  const ok = await node.ingress('echo', '/', { headers: { 'x-big': 'a'.repeat(60 * 1024) } });
  assert.equal(ok.status, 200);
  assert.equal(ok.json.headers['x-big'].length, 60 * 1024);
});

test('malformed requests -> 400 and close', async () => {
  for (const bytes of [
    'THIS IS NOT HTTP\r\n\r\n',
    'GET / HTTP/1.1 trailing\r\nHost: echo.localhost\r\n\r\n',
    'GET / HTTP/1.1\r\nHost: echo.localhost\r\nBad Header Line\r\n\r\n',
    'GET / HTTP/1.1\r\nHost: echo.localhost\r\nContent-Length: abc\r\n\r\n',
    'POST / HTTP/1.1\r\nHost: echo.localhost\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n',
    '\x00\x01\x02\x03\r\n\r\n',
  ]) {
    const r = await rawRequest(node.listenPort, bytes, { timeout: 3000 });
    assert.match(r.text, /^HTTP\/1\.1 400 /, `${JSON.stringify(bytes)} -> ${JSON.stringify(r.text.slice(0, 120))}`);
    assert.ok(r.closed, `${JSON.stringify(bytes)}: connection closed`);
  }
});

// llhttp 8 lets these through; each can make an intermediary and us read a
// request differently (RFC 9112 sections 3.2, 5.1 and 7.1).
test('whitespace in a header name or the target, or chunk data without its CRLF -> 400', async () => {
  const host = 'Host: echo.localhost\r\n';
  for (const [bytes, why] of [
    ['GET / HTTP/1.1\r\nHost : echo.localhost\r\n\r\n', /header name/],
    [`GET / HTTP/1.1\r\n${host}X Forwarded: 1\r\n\r\n`, /header name/],
    [`GET /a\tb HTTP/1.1\r\n${host}\r\n`, /request target/],
    [`POST / HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n`, /chunk data not followed by CRLF/],
  ]) {
    const r = await rawRequest(node.listenPort, bytes, { timeout: 3000 });
    const [res] = parseResponses(r.data, { eof: true }).responses;
    assert.equal(res?.status, 400, `${JSON.stringify(bytes)} -> ${JSON.stringify(r.text.slice(0, 160))}`);
    assert.match(JSON.parse(res.text).error, why);
    assert.ok(r.closed, `${JSON.stringify(bytes)}: connection closed`);
  }
  // The CRLF may come in its own packets.
  const r = await rawRequest(node.listenPort, [
    `POST /split HTTP/1.1\r\n${host}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello`,
    '\r', '\n0\r\n\r\n',
  ], { gap: 30 });
  const [res] = parseResponses(r.data, { eof: true }).responses;
  assert.equal(res?.status, 200, r.text);
  assert.equal(JSON.parse(res.text).body, 'hello');
});

test('bytes past ASCII in the target reach request.url percent-encoded, never as U+FFFD', async () => {
  const target = Buffer.concat([Buffer.from('/p/'), Buffer.from([0xff, 0xfe]), Buffer.from('/\u00e9?q='),
    Buffer.from([0xc3]), Buffer.from('%41')]);
  const r = await rawRequest(node.listenPort, Buffer.concat([Buffer.from('GET '), target,
    Buffer.from(' HTTP/1.1\r\nHost: urlw.localhost\r\nConnection: close\r\n\r\n')]));
  const [res] = parseResponses(r.data, { eof: true }).responses;
  assert.equal(res?.status, 200, r.text);
  const seen = JSON.parse(res.text);
  assert.equal(seen.url, 'http://urlw.localhost/p/%FF%FE/%C3%A9?q=%C3%41');
  assert.equal(seen.pathname, '/p/%FF%FE/%C3%A9');
  assert.equal(seen.search, '?q=%C3%41');
});

test('uncaught exception -> 500 JSON, stack only in the logs (with the tenant)', async () => {
  const from = node.logs.length;
  const r = await node.ingress('crash', '/throw');
  const body = expectJson500(r, 'uncaught exception');
  assert.ok(!r.text.includes('explodeHere'), `no stack in the body: ${r.text}`);
  assert.ok(!/\bat .*:\d+:\d+/.test(r.text), `no stack frames in the body: ${r.text}`);
  const line = await node.waitForLog((l) => l.raw.includes('explodeHere'), { from, what: 'the stack in the log' });
  assert.equal(line.json?.tenant, 'crash', `log line has the tenant: ${line.raw}`);
  assert.ok(line.raw.includes('kaboom-7319'), `log line has the message: ${line.raw}`);
  assert.equal(line.json?.request_id, body.request_id, `log line has the request id: ${line.raw}`);
  assert.ok(['error', 'warn'].includes(line.json?.level), `logged as error: ${line.raw}`);

  const s = await node.ingress('crash', '/throw-sync');
  expectJson500(s, 'exception thrown synchronously inside an async handler');
  const bare = await node.ingress('crash', '/throw-string');
  expectJson500(bare, 'thrown non-Error value');
  const sync = await node.ingress('crashsync', '/throw');
  expectJson500(sync, 'exception from a non-async handler');
  await node.waitForLog((l) => l.raw.includes('sync-throw-9090') && l.json?.tenant === 'crashsync',
    { from, what: 'sync throw logged with the tenant' });
});

test('rejected promise -> 500', async () => {
  const from = node.logs.length;
  const r = await node.ingress('crash', '/reject');
  expectJson500(r, 'rejected promise');
  const a = await node.ingress('crash', '/async-throw');
  expectJson500(a, 'throw after await');
  const line = await node.waitForLog((l) => l.raw.includes('rejected-4242'), { from, what: 'rejection logged' });
  assert.equal(line.json?.tenant, 'crash');
  await node.waitForLog((l) => l.raw.includes('async-boom-5150') && l.json?.tenant === 'crash',
    { from, what: 'async throw logged' });
});

test('a return value that is not a Response -> 500 naming the type', async () => {
  for (const [name, p, type] of [
    ['crash', '/number', /number/i],
    ['crash', '/string', /string/i],
    ['crash', '/undefined', /undefined/i],
    ['crash', '/object', /object/i],
    ['crashsync', '/number', /number/i],
    ['crashsync', '/null', /null/i],
  ]) {
    const r = await node.ingress(name, p);
    const body = expectJson500(r, `${name}${p}`);
    assert.match(body.error, type, `${name}${p}: error names the type: ${r.text}`);
  }
  // the worker is not harmed by its failures
  const ok = await node.ingress('crash', '/ok');
  assert.equal(ok.status, 200);
  assert.equal(ok.text, 'still fine');
  assert.equal((await node.ingress('crashsync', '/')).text, 'sync ok');
});

test('eval and new Function throw an EvalError the worker can catch', async () => {
  const r = await node.ingress('evil', '/');
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.text.split('\n'), ['eval EvalError true true', 'Function EvalError true true']);
});

test('Response bodies: string, ArrayBuffer, Uint8Array, Response.json', async () => {
  const s = await node.ingress('shapes', '/string');
  assert.equal(s.status, 200);
  assert.equal(s.text, 'text body');
  assert.match(s.headers['content-type'] ?? '', /^text\/plain;\s*charset=utf-8$/i);
  assert.equal(s.headers['content-length'], '9');

  const u = await node.ingress('shapes', '/unicode');
  assert.equal(u.text, 'h\u00e9llo \u2713');
  assert.equal(u.headers['content-length'], String(Buffer.byteLength('h\u00e9llo \u2713')));

  const ab = await node.ingress('shapes', '/arraybuffer');
  assert.equal(ab.text, 'from arraybuffer');
  const u8 = await node.ingress('shapes', '/uint8');
  assert.equal(u8.text, 'uint8');

  const bin = await node.ingress('shapes', '/binary');
  assert.equal(bin.body.length, 256);
  assert.ok(bin.body.every((b, i) => b === i), 'binary body byte for byte');
  assert.equal(bin.headers['content-type'], 'application/octet-stream');

  const j = await node.ingress('shapes', '/json');
  assert.equal(j.status, 200);
  assert.match(j.headers['content-type'] ?? '', /^application\/json/);
  assert.deepEqual(j.json, { a: 1, list: [true, null, 'x'] });
  const js = await node.ingress('shapes', '/json-status');
  assert.equal(js.status, 201);
  assert.equal(js.headers['x-json'], 'yes');
  assert.deepEqual(js.json, { created: true });

  const empty = await node.ingress('shapes', '/empty');
  assert.equal(empty.status, 200);
  assert.equal(empty.body.length, 0);
  const html = await node.ingress('shapes', '/custom-type');
  assert.equal(html.headers['content-type'], 'text/html; charset=utf-8');
});

test('a 2 MiB response body', async () => {
  const r = await node.ingress('shapes', '/big');
  assert.equal(r.status, 200);
  assert.equal(r.body.length, 2 * 1024 * 1024);
  assert.ok(r.body.every((b) => b === 0x78));
});

test('console output and ctx.waitUntil reach the log, tagged with tenant and request', async () => {
  const from = node.logs.length;
  const r = await node.ingress('logger', '/');
  assert.equal(r.text, 'logged');
  const log = await node.waitForLog((l) => l.raw.includes('console-marker-111'), { from, what: 'console.log line' });
  assert.equal(log.json?.tenant, 'logger', log.raw);
  assert.ok(typeof log.json?.request_id === 'string' && log.json.request_id.length > 0, `request id: ${log.raw}`);
  assert.match(log.raw, /"a"|a: 1/, `the logged object: ${log.raw}`);
  const err = await node.waitForLog((l) => l.raw.includes('console-error-222'), { from, what: 'console.error line' });
  assert.ok(['error', 'warn'].includes(err.json?.level), `console.error level: ${err.raw}`);
  assert.equal(err.json?.tenant, 'logger');
  const later = await node.waitForLog((l) => l.raw.includes('waituntil-marker-333'),
    { from, timeout: 3000, what: 'the ctx.waitUntil task to run after the response' });
  assert.equal(later.json?.tenant, 'logger', later.raw);
});

test('the globals of the Workers API are there', async () => {
  const r = await node.ingress('globals', '/');
  assert.equal(r.status, 200, r.text);
  for (const [k, v] of Object.entries(r.json)) assert.equal(v, true, `${k}: ${v}`);
});

test('status and headers pass through', async () => {
  const t = await node.ingress('shapes', '/status');
  assert.equal(t.status, 418);
  assert.equal(t.text, 'teapot');
  assert.equal(t.headers['x-one'], '1');
  assert.equal(t.headers['x-two'], 'two');
  const red = await node.ingress('shapes', '/redirect');
  assert.equal(red.status, 302);
  assert.equal(red.headers.location, '/elsewhere');
  const m = await node.ingress('shapes', '/multi');
  assert.equal(m.headers['x-multi'], 'a, b');
  const nc = await node.ingress('shapes', '/no-content');
  assert.equal(nc.status, 204);
  assert.equal(nc.body.length, 0);
  const nf = await node.ingress('shapes', '/nowhere');
  assert.equal(nf.status, 404);
  assert.equal(nf.text, 'not here');
});

test('HEAD: headers without a body, connection stays usable', async () => {
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    const head = await conn.request('HEAD /string HTTP/1.1\r\nHost: shapes.localhost\r\n\r\n', { isHead: true });
    assert.equal(head.status, 200);
    assert.match(head.headers['content-type'] ?? '', /^text\/plain/);
    if (head.headers['content-length'] !== undefined) assert.equal(head.headers['content-length'], '9');
    // if the HEAD response had leaked a body, this response would not parse
    const get = await conn.request('GET /json HTTP/1.1\r\nHost: shapes.localhost\r\n\r\n');
    assert.equal(get.status, 200);
    assert.deepEqual(JSON.parse(get.text), { a: 1, list: [true, null, 'x'] });
    const echo = await conn.request('HEAD / HTTP/1.1\r\nHost: echo.localhost\r\n\r\n', { isHead: true });
    assert.equal(echo.status, 200);
    const after = await conn.request('GET /string HTTP/1.1\r\nHost: shapes.localhost\r\n\r\n');
    assert.equal(after.text, 'text body');
  } finally {
    conn.close();
  }
  await sleep(0);
});

test('a client that never finishes its header block is cut off', { timeout: HEADER_TIMEOUT_MS + 10000 }, async () => {
  const r = await slowClient;
  assert.ok(r.closed, `connection closed (after ${r.ms} ms)`);
  assert.ok(r.ms >= HEADER_TIMEOUT_MS - 200, `not before the timeout (${r.ms} ms)`);
  assert.ok(r.ms <= HEADER_TIMEOUT_MS + 2500, `soon after the timeout (${r.ms} ms)`);
  if (r.data.length) assert.match(r.text, /^HTTP\/1\.1 408 /, r.text.slice(0, 120));
});

// ---- the Host header and the request target (RFC 9112 section 3.2) ----

// One request on a fresh connection; its response.
async function sendRaw(bytes) {
  const r = await rawRequest(node.listenPort, bytes, { timeout: 5000 });
  const [res] = parseResponses(r.data, { eof: true }).responses;
  assert.ok(res, `a response to ${JSON.stringify(bytes)}: ${JSON.stringify(r.text.slice(0, 200))}`);
  return { ...res, json: (() => { try { return JSON.parse(res.text); } catch { return null; } })() };
}

function hostRequest(host, target = '/p', extra = '') {
  return `GET ${target} HTTP/1.1\r\nHost: ${host}\r\n${extra}Connection: close\r\n\r\n`;
}

function expect400(res, what, pattern) {
  assert.equal(res.status, 400, `${what}: ${res.status} ${res.text}`);
  assert.equal(typeof res.json?.error, 'string', `${what}: JSON error: ${res.text}`);
  if (pattern) assert.match(res.json.error, pattern, `${what}: ${res.text}`);
  assert.equal(typeof res.json.request_id, 'string', `${what}: request_id: ${res.text}`);
}

const BAD_HOSTS = [
  ['urlw.localhost:abc', /port/],
  ['urlw:99999', /port/],
  ['urlw:0', /port/],
  ['urlw:', /port/],
  ['urlw.a b', /whitespace/],
  ['urlw.x@evil.com', /user information/],
  ['urlw.x/evil', /path/],
  ['urlw.x?q=1', /path/],
  ['urlw.%41', /percent/],
  ['urlw.123', /number/],
  ['urlw.0x10', /number/],
  ['urlw.xn--a', /xn--/],
  ['[::1', /IPv6/],
  ['', /empty/],
];

test('a Host that is not a valid authority -> 400 before any worker runs', async () => {
  for (const [host, why] of BAD_HOSTS) {
    const res = await sendRaw(hostRequest(host));
    expect400(res, `Host: ${JSON.stringify(host)}`, why);
    assert.match(res.json.error, /^invalid Host header: /, `Host: ${JSON.stringify(host)}`);
  }
});

test('a valid Host: surrounding whitespace, port, mixed case, IDNA', async () => {
  const cases = [
    ['urlw.localhost ', 'urlw.localhost', ''],
    ['urlw.localhost\t', 'urlw.localhost', ''],
    ['hello.localhost:8080', null, null],
    [`urlw.localhost:${node.listenPort}`, 'urlw.localhost', String(node.listenPort)],
    ['urlw.localhost:08080', 'urlw.localhost', '8080'],
    ['urlw.localhost:80', 'urlw.localhost', ''],
    ['URLW.LocalHost', 'urlw.localhost', ''],
    ['uRlW:8081', 'urlw', '8081'],
    ['urlw.xn--p1ai', 'urlw.xn--p1ai', ''],
    ['urlw.x.', 'urlw.x.', ''],
  ];
  for (const [host, hostname, port] of cases) {
    const res = await sendRaw(hostRequest(host, '/p?q=1'));
    assert.equal(res.status, 200, `Host: ${JSON.stringify(host)}: ${res.status} ${res.text}`);
    if (hostname === null) {
      assert.equal(res.text, 'hello from hello');
      continue;
    }
    const seen = JSON.parse(res.text);
    assert.equal(seen.hostname, hostname, `Host: ${JSON.stringify(host)}: ${res.text}`);
    assert.equal(seen.port, port, `Host: ${JSON.stringify(host)}: ${res.text}`);
    assert.equal(seen.pathname, '/p');
    assert.equal(seen.search, '?q=1');
    assert.equal(seen.url, `http://${seen.host}/p?q=1`, 'request.url is already in its parsed form');
  }
});

test('an IP address in Host is valid but names no worker -> 400', async () => {
  for (const host of ['127.0.0.1', `127.0.0.1:${node.listenPort}`, '[::1]', '[::1]:8080']) {
    const res = await sendRaw(hostRequest(host));
    expect400(res, `Host: ${host}`, /names no worker/);
  }
  // a host name whose first label is not a worker name
  expect400(await sendRaw(hostRequest('no_such.localhost')), 'underscore', /names no worker/);
  expect400(await sendRaw(hostRequest('.localhost')), 'empty first label', /names no worker/);
});

test('no Host, or more than one -> 400 (RFC 9112 section 3.2)', async () => {
  expect400(await sendRaw('GET / HTTP/1.1\r\nConnection: close\r\n\r\n'), 'no Host', /missing Host/);
  expect400(await sendRaw('GET / HTTP/1.0\r\n\r\n'), 'HTTP/1.0 without Host', /missing Host/);
  for (const [a, b] of [['echo.x', 'nosuch.x'], ['nosuch.x', 'echo.x'], ['echo.x', 'echo.x']]) {
    const res = await sendRaw(`GET / HTTP/1.1\r\nHost: ${a}\r\nX-Between: 1\r\nhost: ${b}\r\nConnection: close\r\n\r\n`);
    expect400(res, `Host: ${a} then ${b}`, /more than one Host/);
  }
});

test('absolute-form target: routed by its authority, which request.url shows', async () => {
  const abs = await sendRaw(hostRequest('nosuch.x', 'http://urlw.example/abs?x=1'));
  assert.equal(abs.status, 200, abs.text);
  const seen = JSON.parse(abs.text);
  assert.equal(seen.url, 'http://urlw.example/abs?x=1');
  assert.equal(seen.hostHeader, 'nosuch.x', 'the Host header itself is passed on untouched');

  // The finding: Host names echo, the target nosuch; the target wins.
  const other = await sendRaw(hostRequest('echo.x', 'http://nosuch.x/abs'));
  assert.equal(other.status, 404, other.text);
  assert.ok(other.text.includes('nosuch'), other.text);

  for (const [target, url] of [
    ['HTTP://URLW.Example:8080/A', 'http://urlw.example:8080/A'],
    ['https://urlw.example/s', 'http://urlw.example/s'],
    ['http://urlw.example', 'http://urlw.example/'],
    ['http://urlw.example?q', 'http://urlw.example/?q'],
  ]) {
    const res = await sendRaw(hostRequest('echo.x', target));
    assert.equal(res.status, 200, `${target}: ${res.text}`);
    assert.equal(JSON.parse(res.text).url, url, target);
  }

  for (const target of ['http://urlw.x@evil.com/p', 'http://urlw:99999/p', 'http:///p', 'http://urlw.1/p']) {
    const res = await sendRaw(hostRequest('urlw.x', target));
    expect400(res, target, /^invalid authority in the request target: /);
  }
  // The Host header is still checked (section 3.2) though the target routes.
  expect400(await sendRaw(hostRequest('urlw.x:abc', 'http://urlw.x/p')), 'bad Host, absolute target',
    /^invalid Host header/);
});

test('150 requests with a bad Host cost the tenant nothing', async () => {
  // A tenant of its own, so that its first counted request is the good one
  // below. One keep-alive connection: the 400s do not close it, and the good
  // request at the end is answered by the same process, whose statistics
  // report holds whatever the bad ones would have counted.
  await node.deployOk('victim', { 'index.js': URLW });
  const conn = new RawConn(node.listenPort);
  await conn.connect();
  try {
    const bad = ['victim.localhost:abc', 'victim:99999', 'victim.a b', 'victim.x/evil',
      'victim.x@evil.com', 'victim.9', 'victim.localhost:'];
    for (let i = 0; i < 150; i++) {
      const host = bad[i % bad.length];
      const res = await conn.request(`GET /p HTTP/1.1\r\nHost: ${host}\r\n\r\n`);
      assert.equal(res.status, 400, `request ${i}, Host: ${host}: ${res.status} ${res.text}`);
    }
    const ok = await conn.request('GET /p HTTP/1.1\r\nHost: victim.localhost\r\n\r\n');
    assert.equal(ok.status, 200, ok.text);
  } finally {
    conn.close();
  }
  let stats;
  await waitFor(async () => {
    const r = await node.control('GET', '/v1/tenants/victim');
    stats = r.json;
    return r.status === 200 && stats.requests >= 1;
  }, { timeout: 10000, what: 'the good request in the tenant statistics' });
  assert.equal(stats.state, 'active', JSON.stringify(stats));
  assert.equal(stats.errors, 0, JSON.stringify(stats));
  assert.equal(stats.uncaught_errors ?? 0, 0, JSON.stringify(stats));
});

test('every log line is a JSON object with time, level, process and msg', () => {
  assert.deepEqual(node.malformedLogs().map((l) => l.raw), []);
  const procs = new Set(node.logs.map((l) => l.json.process));
  assert.ok(procs.has('supervisor'), [...procs].join(','));
  assert.ok([...procs].some((p) => /^worker-[12]$/.test(p)), `worker processes log as worker-K: ${[...procs]}`);
});

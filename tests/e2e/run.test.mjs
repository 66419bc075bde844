// POST /v1/run: one-shot execution in a fresh isolate, the fetch and the
// run(input, env) forms, its errors, and `edgectl run`.
import assert from 'node:assert/strict';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { after, before, test } from 'node:test';
import { EDGECTL, runProcess, startNode, tempDir, waitFor, workerList, writeFile, echoUpstream } from './lib/node.mjs';

let node;
let upstream;
let P; // the local upstream's port: the API a run's egress rules allow
const TOOL_TOKEN = `tool-${randomBytes(8).toString('hex')}`;

before(async () => {
  upstream = await echoUpstream();
  P = upstream.address().port;
  node = await startNode({ workers: 2, extraArgs: ['--egress-allow-cidr', '127.0.0.1/32'] });
});

after(async () => {
  try {
    if (node) {
      for (const l of node.logs) assert.ok(!l.raw.includes(TOOL_TOKEN), `a log line holds a secret: ${l.raw}`);
      await node.stop({ clean: true });
    }
  } finally {
    upstream?.close(); // or the test process waits on it for ever
  }
});

function run(body) {
  return node.control('POST', '/v1/run', { body });
}

// The answer without what every run reports (console lines, CPU, wall time, cold).
function core(json) {
  const { logs, logs_dropped, cpu_ms, wall_ms, cold, ...rest } = json;
  return rest;
}

const ECHO = `export default {
  async fetch(request, env) {
    const body = await request.text();
    return new Response(JSON.stringify({ method: request.method, url: request.url,
      test: request.headers.get('x-test'), body, env }), {
      status: 202, headers: { 'content-type': 'application/json', 'x-one': 'a' } });
  },
};`;

test('the fetch form: the request in, the response out as JSON', async () => {
  const r = await run({
    main_module: 'echo.js', modules: { 'echo.js': ECHO }, env: { K: 'v' },
    request: { method: 'POST', url: 'https://example.com/p?q=1', headers: { 'x-test': 'yes' }, body: 'hello' },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.status, 202);
  assert.equal(r.json.headers['x-one'], 'a');
  assert.equal(r.json.headers['content-type'], 'application/json');
  assert.deepEqual(JSON.parse(r.json.body), {
    method: 'POST', url: 'https://example.com/p?q=1', test: 'yes', body: 'hello', env: { K: 'v' },
  });
  assert.equal(r.json.body_encoding, undefined);
});

test('repeated response headers: joined, except Set-Cookie, which stays one value per cookie', async () => {
  const r = await run({ modules: { 'c.js': `export default { fetch() {
    const h = new Headers();
    h.append('x-many', 'a');
    h.append('x-many', 'b');
    h.append('set-cookie', 'a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT');
    h.append('set-cookie', 'b=2');
    return new Response('ok', { headers: h });
  } };` } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.headers['x-many'], 'a, b');
  assert.deepEqual(r.json.headers['set-cookie'], ['a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT', 'b=2']);
});

test('the fetch form with defaults: GET on a fresh isolate every time', async () => {
  const counter = `let n = 0; export default { fetch(req) { n++; return new Response(req.method + ' ' + n); } };`;
  for (let i = 0; i < 3; i++) {
    const r = await run({ modules: { 'c.js': counter } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.body, 'GET 1');
  }
});

test('binary bodies travel as base64 both ways', async () => {
  const r = await run({
    modules: { 'b.js': `export default { async fetch(req) {
      const b = new Uint8Array(await req.arrayBuffer());
      return new Response(b.map((x) => 255 - x)); } };` },
    request: { method: 'PUT', body: Buffer.from([0, 1, 2, 255]).toString('base64'), body_encoding: 'base64' },
  });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.body_encoding, 'base64');
  assert.deepEqual([...Buffer.from(r.json.body, 'base64')], [255, 254, 253, 0]);
});

test('the run form: run(input, env) -> {"result"}', async () => {
  let r = await run({
    modules: { 'r.js': `export function run(input, env) { return { sum: input.a + input.b, env }; }` },
    input: { a: 2, b: 40 }, env: { E: 1 },
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(core(r.json), { result: { sum: 42, env: { E: 1 } } });
  // async, on the default export, returning nothing, input of any JSON type
  r = await run({
    modules: { 'r.js': `export default { async run(input) { await null; return input.length; } };` },
    input: [1, 2, 3],
  });
  assert.deepEqual(core(r.json), { result: 3 });
  r = await run({ modules: { 'r.js': `export function run() {}` }, input: null });
  assert.deepEqual(core(r.json), { result: null });
});

test('a syntax error is a 400 that says where', async () => {
  const r = await run({ modules: { 'bad.js': `export default {\n  fetch() { return new Response('x')) }\n};` } });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.kind, 'syntax');
  assert.match(r.json.error, /SyntaxError/);
  assert.equal(r.json.module, 'bad.js');
  assert.equal(r.json.line, 2);
});

test('a module with neither fetch nor run, or no run for input: 400', async () => {
  let r = await run({ modules: { 'n.js': `export default { hello() {} };` } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /neither/);
  r = await run({ modules: { 'n.js': ECHO }, input: 1 });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /run\(input, env\)/);
  // The generated wrapper is no place the caller wrote: none is named.
  assert.equal(r.json.module, undefined, r.text);
  assert.equal(r.json.line, undefined, r.text);
});

test('a result JSON cannot hold is a 500 that says so, without a place in the wrapper', async () => {
  for (const [result, why] of [['10n', /BigInt/], ['(() => { const o = {}; o.o = o; return o; })()', /circular/i]]) {
    const r = await run({ modules: { 'r.js': `export function run() { return ${result}; }` }, input: {} });
    assert.equal(r.status, 500, r.text);
    assert.match(r.json.error, /^TypeError: run\(\) returned a value JSON cannot hold: /);
    assert.match(r.json.error, why);
    assert.equal(r.json.module, undefined, r.text);
  }
});

test('an exception is a 500 with its message', async () => {
  let r = await run({ modules: { 'x.js': `export default { fetch() { throw new TypeError('nope'); } };` } });
  assert.equal(r.status, 500, r.text);
  assert.equal(r.json.kind, 'exception');
  assert.equal(r.json.error, 'TypeError: nope');
  r = await run({ modules: { 'x.js': `export async function run() { throw new Error('run failed'); }` }, input: {} });
  assert.equal(r.status, 500, r.text);
  assert.equal(r.json.error, 'Error: run failed');
});

test('limits: CPU and memory are 503, the wall time 504', async () => {
  let r = await run({ modules: { 's.js': `export function run() { for (;;) {} }` }, input: 1, limits: { cpu_ms: 20 } });
  assert.equal(r.status, 503, r.text);
  assert.deepEqual(core(r.json), { error: 'exceeded CPU limit', kind: 'cpu', limit_ms: 20 });
  r = await run({
    modules: { 'm.js': `export function run() { const keep = [];
      for (;;) keep.push(Array.from({ length: 10000 }, (_, i) => ({ i, s: 'v' + i }))); }` },
    input: 1, limits: { memory_mb: 16, cpu_ms: 5000 },
  });
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error, 'exceeded memory limit');
  r = await run({
    modules: { 'w.js': `export default { fetch() { return new Promise(() => {}); } };` },
    limits: { wall_ms: 300 },
  });
  assert.equal(r.status, 504, r.text);
  assert.equal(r.json.error, 'exceeded wall time limit');
  // a limit at module evaluation is still a limit
  r = await run({ modules: { 't.js': `for (;;) {}\nexport default { fetch() {} };` }, limits: { cpu_ms: 20 } });
  assert.equal(r.status, 503, r.text);
});

test('bad bodies: 400 / 415 with the problem named', async () => {
  let r = await run({ modules: {} });
  assert.equal(r.status, 400, r.text);
  r = await run({ modules: { 'a.js': ECHO }, request: 'GET /' });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /"request" must be an object/);
  r = await run({ modules: { 'a.js': ECHO }, request: {}, input: 1 });
  assert.equal(r.status, 400, r.text);
  r = await run({ modules: { 'a.js': ECHO }, request: { body: '%%%', body_encoding: 'base64' } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /base64/);
  r = await node.control('POST', '/v1/run', { body: 'not json', headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 400, r.text);
  r = await node.control('POST', '/v1/run', { body: '', headers: { 'content-type': 'application/json' } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /the body is empty/);
  r = await node.control('GET', '/v1/run');
  assert.equal(r.status, 405, r.text);
  r = await node.control('POST', '/v1/run', { body: ECHO, headers: { 'content-type': 'application/javascript' } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.status, 202);
  r = await node.control('POST', '/v1/run', { body: {}, token: 'wrong' });
  assert.equal(r.status, 401);
});

test('a malformed request is a 400 naming the field, before any code runs', async () => {
  const cases = [
    [{ url: 'not a url' }, 'request.url'],
    [{ url: 'ftp://x/' }, 'request.url'],
    [{ url: 'http://x/a b' }, 'request.url'],
    [{ url: 42 }, 'request.url'],
    [{ method: 'BAD METHOD' }, 'request.method'],
    [{ method: '' }, 'request.method'],
    [{ method: 7 }, 'request.method'],
    [{ headers: { 'x-a': 'v\r\nx-injected: 1' } }, 'request.headers'],
    [{ headers: [['x-a', 'v\n']] }, 'request.headers'],
    [{ headers: { 'x-a': 'v\u0000' } }, 'request.headers'],
    [{ headers: { 'bad name': 'v' } }, 'request.headers'],
    [{ headers: [['x-a']] }, 'request.headers'],
    [{ headers: 'x-a: v' }, 'request.headers'],
    [{ bogus: 1 }, 'request.bogus'],
  ];
  for (const [request, key] of cases) {
    const r = await run({ modules: { 'a.js': ECHO }, request });
    const what = JSON.stringify(request);
    assert.equal(r.status, 400, `${what}: ${r.text}`);
    assert.equal(r.json.key, key, `${what}: ${r.text}`);
    assert.ok(r.json.error.startsWith(key) || r.json.error.includes(`"${key}"`), `${what}: ${r.text}`);
  }
  // the same fields, well formed
  const r = await run({
    modules: { 'a.js': ECHO },
    request: { method: 'PATCH', url: 'http://[::1]:8080/x?y=%20', headers: [['x-test', 'a\tb']], body: 'b' },
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(JSON.parse(r.json.body),
    { method: 'PATCH', url: 'http://[::1]:8080/x?y=%20', test: 'a\tb', body: 'b', env: {} });
});

test('U+0000 travels both ways: input, env, request and response bodies, results', async () => {
  let r = await run({
    modules: { 'n.js': `export function run(input, env) { return { got: input, env: env.K, made: 'x\\u0000y' }; }` },
    input: 'a\u0000b', env: { K: '\u0000' },
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(core(r.json), { result: { got: 'a\u0000b', env: '\u0000', made: 'x\u0000y' } });
  r = await run({ modules: { 'n.js': `export function run() { return '\\u0000'; }` }, input: null });
  assert.deepEqual(core(r.json), { result: '\u0000' });
  r = await run({ modules: { 'n.js': `export default { fetch() { return new Response(new Uint8Array([97, 0, 98])); } };` } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.body, 'a\u0000b');
  assert.equal(r.json.body_encoding, undefined);
  r = await run({ modules: { 'n.js': `export default { fetch() { return new Response(new Uint8Array(1)); } };` } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.body, '\u0000');
  r = await run({ modules: { 'e.js': ECHO }, request: { method: 'POST', body: 'b\u0000' } });
  assert.equal(r.status, 200, r.text);
  assert.equal(JSON.parse(r.json.body).body, 'b\u0000');
});

test('lone surrogates in a result become U+FFFD; pairs and escaped text stay', async () => {
  const r = await run({
    modules: { 's.js': `export function run() {
      return { a: '\\ud800', b: 'x\\udc00y', ['k\\udbff']: '\\ud83d\\ude00', c: '\\\\ud800', d: ['\\udfff\\ud800'] }; }` },
    input: null,
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(core(r.json), {
    result: { a: '\ufffd', b: 'x\ufffdy', 'k\ufffd': '\u{1f600}', c: '\\ud800', d: ['\ufffd\ufffd'] },
  });
});

test('integers of 2^63 and more are numbers, as in JavaScript; small ones stay integers', async () => {
  const mod = JSON.stringify(`export function run(input) {
    return { input, big: 12345678901234567890, neg: -(2 ** 64), small: 3, half: 0.5 }; }`);
  let r = await node.control('POST', '/v1/run', {
    body: `{"modules":{"b.js":${mod}},"limits":{"cpu_ms":1000},"input":[12345678901234567890,7]}`,
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(core(r.json), {
    result: { input: [12345678901234567890, 7], big: 12345678901234567890, neg: -(2 ** 64), small: 3, half: 0.5 },
  });
  assert.match(r.text, /"small":3[,}]/);
  assert.match(r.text, /,7\]/);
  r = await run({ modules: { 'b.js': `export function run() { return 12345678901234567890; }` }, input: null });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.result, 12345678901234567890);
  // a limit is still an integer in range
  r = await node.control('POST', '/v1/run', {
    body: `{"modules":{"b.js":${mod}},"limits":{"cpu_ms":12345678901234567890},"input":1}`,
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.limit, 'cpu_ms');
});

test('an answer over the limit is a 502 saying so, as soon as the worker knows', async () => {
  // 16 MiB of zero bytes: UTF-8 text, six bytes of JSON each
  const r = await run({
    modules: { 'l.js': `export default { fetch() { return new Response(new Uint8Array(16 << 20)); } };` },
    limits: { cpu_ms: 5000 },
  });
  assert.equal(r.status, 502, r.text);
  assert.equal(r.json.kind, 'too_large');
  assert.equal(r.json.limit_bytes, 64 * 1024 * 1024);
  assert.ok(r.json.size_bytes > r.json.limit_bytes, r.text);
  assert.match(r.json.error, /too large.*limit of 67108864/);
});

test('no isolate is left behind', async () => {
  for (let i = 0; i < 10; i++) await run({ modules: { 'a.js': ECHO } });
  // Each process reports the field (a process that never reported, or a
  // report without it, is not a process with 0 isolates).
  await waitFor(async () => {
    const list = workerList(await node.nodeInfo());
    return list.length === 2 && list.every((w) => w.isolates === 0);
  }, { timeout: 5000, what: 'both processes to report 0 isolates' });
});

test('edgectl run FILE [--input JSON]', async () => {
  const dir = tempDir('edgectl-run-');
  writeFile(dir, 'hello.js', `export default { fetch() {
    const h = new Headers([['set-cookie', 'a=1'], ['set-cookie', 'b=2']]);
    return new Response('hello from run', { headers: h });
  } };\n`);
  writeFile(dir, 'sum.js', `export function run(input) { return input.reduce((a, b) => a + b, 0); }\n`);
  const base = ['--node', `http://127.0.0.1:${node.controlPort}`, '--token-file', path.join(node.dataDir, 'control.token')];
  let r = await runProcess(EDGECTL, [...base, 'run', 'hello.js'], { cwd: dir });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^HTTP 200/);
  assert.match(r.stdout, /hello from run/);
  assert.match(r.stdout, /^set-cookie: a=1\nset-cookie: b=2$/m);
  r = await runProcess(EDGECTL, [...base, 'run', 'sum.js', '--input', '[1,2,3]'], { cwd: dir });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /result.*6/);
  r = await runProcess(EDGECTL, [...base, '--json', 'run', 'sum.js', '--input', '[1,2,3]'], { cwd: dir });
  assert.deepEqual(core(JSON.parse(r.stdout)), { result: 6 });
});

// ---- what a run reports: console lines, exceptions, CPU, wall time, cold ----

test('logs: console lines come back with the answer, in order, with level and time', async () => {
  const t0 = Date.now();
  const r = await run({ modules: { 'l.js': `export default { fetch() {
    console.log('hello', { a: 1 }); console.warn('careful'); console.error('bad'); console.debug('fine');
    return new Response('ok'); } };` } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.body, 'ok');
  assert.deepEqual(r.json.logs.map((l) => [l.level, l.message]),
    [['info', 'hello { a: 1 }'], ['warn', 'careful'], ['error', 'bad'], ['debug', 'fine']]);
  for (const l of r.json.logs) assert.ok(l.time >= t0 - 1000 && l.time <= Date.now() + 1000, r.text);
  assert.equal(r.json.logs_dropped, undefined);
  // the run form too, and a run that logs nothing has an empty list
  const q = await run({ modules: { 'r.js': `export function run(i) { console.log('got', i); return i; }` }, input: 7 });
  assert.deepEqual(q.json.logs.map((l) => l.message), ['got 7']);
  const e = await run({ modules: { 'a.js': ECHO } });
  assert.deepEqual(e.json.logs, []);
});

test('logs: past 256 lines (or 64 KiB) lines are dropped and counted; long lines are cut', async () => {
  let r = await run({ modules: { 'r.js': `export function run() { for (let i = 0; i < 1000; i++) console.log('line ' + i); return 1; }` }, input: 1 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.logs.length, 256);
  assert.equal(r.json.logs[255].message, 'line 255');
  assert.equal(r.json.logs_dropped, 744);
  r = await run({ modules: { 'r.js': `export function run() { for (let i = 0; i < 40; i++) console.log(String(i % 10).repeat(10000)); return 1; }` }, input: 1 });
  assert.ok(r.json.logs.every((l) => l.message.length === 3500), 'each line is cut at 3500 bytes');
  assert.equal(r.json.logs.length, Math.floor(65536 / 3500));
  assert.equal(r.json.logs_dropped, 40 - r.json.logs.length);
});

test('logs come back with a failure too, and an exception says where, with its stack', async () => {
  const r = await run({ modules: { 'index.js': `function helper() {\n  throw new RangeError('too far');\n}\nexport default { fetch() { console.log('about to'); helper(); } };` } });
  assert.equal(r.status, 500, r.text);
  assert.equal(r.json.error, 'RangeError: too far');
  assert.deepEqual(r.json.logs.map((l) => l.message), ['about to']);
  const e = r.json.exception;
  assert.equal(e.name, 'RangeError');
  assert.equal(e.message, 'too far');
  assert.equal(e.module, 'index.js');
  assert.equal(e.line, 2);
  assert.equal(e.column, 9);
  assert.match(e.stack, /^RangeError: too far\n/);
  assert.match(e.stack, /at helper \(index\.js:2:9\)/);
  assert.match(e.stack, /index\.js:4:\d+/);
  assert.doesNotMatch(e.stack, /edgenode:/, 'no frame of the generated wrapper or the runtime');
  // thrown at the top level: 400, with the exception all the same
  const t = await run({ modules: { 'top.js': `\n\nthrow new TypeError('at load');\nexport default {};` } });
  assert.equal(t.status, 400, t.text);
  assert.equal(t.json.exception.name, 'TypeError');
  assert.equal(t.json.exception.line, 3);
  // a syntax error has one too; a limit is no exception
  const s2 = await run({ modules: { 'bad.js': `export default {\n  fetch() { return 1)) }\n};` } });
  assert.equal(s2.json.exception.name, 'SyntaxError');
  assert.equal(s2.json.exception.line, 2);
  const c = await run({ modules: { 's.js': `export function run() { for (;;) {} }` }, input: 1, limits: { cpu_ms: 20 } });
  assert.equal(c.json.exception, undefined, c.text);
});

test('cpu_ms, wall_ms and cold: what the run cost, in a fresh isolate', async () => {
  const r = await run({ modules: { 'r.js': `export function run() { let x = 0; for (let i = 0; i < 3e6; i++) x += i; return x > 0; }` }, input: 1 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.cold, true);
  assert.equal(typeof r.json.cpu_ms, 'number');
  assert.ok(r.json.cpu_ms > 0, r.text);
  assert.ok(r.json.wall_ms > 0, r.text);
  // The wall time spans everything the run did, waits included.
  const w = await run({ modules: { 'w.js': `export async function run() { await new Promise((r) => setTimeout(r, 50)); return 1; }` }, input: 1 });
  assert.ok(w.json.wall_ms >= 50, w.text);
  assert.ok(w.json.wall_ms >= w.json.cpu_ms, w.text);
  const f = await run({ modules: { 'x.js': `export function run() { throw new Error('x'); }` }, input: 1, limits: { cpu_ms: 20 } });
  assert.equal(f.json.cold, true);
  assert.equal(typeof f.json.cpu_ms, 'number');
});

// ---- egress: generated code calls an allowed API with an injected secret ----

const FETCHER = `export async function run(input) {
  try {
    const res = await fetch(input.url);
    return { status: res.status, body: await res.json() };
  } catch (err) { return { error: String(err.message) }; }
}`;

function toolRules(secret = 'TOOL_TOKEN') {
  return [{ match: `http://127.0.0.1:${P}/tool/*`, inject: { headers: { Authorization: `Bearer \${secret:${secret}}` } } }];
}

test('egress: a run fetches what its rules allow, with the secret of its "as" worker injected', async () => {
  const d = await node.control('PUT', '/v1/workers/agent-tools', { body: { modules: { 'index.js': ECHO } } });
  assert.equal(d.status, 201, d.text);
  const put = await node.control('PUT', '/v1/secrets/TOOL_TOKEN', { body: { value: TOOL_TOKEN, workers: ['agent-tools'] } });
  assert.equal(put.status, 201, put.text);
  const r = await run({ modules: { 'f.js': FETCHER }, egress: toolRules(), as: 'agent-tools',
    input: { url: `http://127.0.0.1:${P}/tool/weather?city=Oslo` } });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.result, { status: 200, body: { path: '/tool/weather?city=Oslo', authorization: `Bearer ${TOOL_TOKEN}` } });
  // The sandbox never sees the secret: not in its answer, only upstream.
  assert.ok(!JSON.stringify(r.json.logs).includes(TOOL_TOKEN));
  // A URL no rule allows is denied, in the run's own error.
  const denied = await run({ modules: { 'f.js': FETCHER }, egress: toolRules(), as: 'agent-tools',
    input: { url: `http://127.0.0.1:${P}/admin/delete` } });
  assert.equal(denied.status, 200, denied.text);
  assert.match(denied.json.result.error, /egress denied/);
  // Rules without secrets need no "as".
  const open = await run({ modules: { 'f.js': FETCHER }, egress: [{ match: `http://127.0.0.1:${P}/tool/*` }],
    input: { url: `http://127.0.0.1:${P}/tool/x` } });
  assert.deepEqual(open.json.result, { status: 200, body: { path: '/tool/x', authorization: null } });
});

test('egress: the run\'s policy ends with the run; without rules a run cannot fetch', async () => {
  const none = await run({ modules: { 'f.js': FETCHER }, input: { url: `http://127.0.0.1:${P}/tool/x` } });
  assert.equal(none.status, 200, none.text);
  assert.match(none.json.result.error, /cannot make host calls/);
  // The grant is the "as" worker's: revoked, a later run's injection fails at the egress.
  const revoke = await node.control('DELETE', '/v1/secrets/TOOL_TOKEN/workers/agent-tools');
  assert.ok(revoke.status < 300, revoke.text);
  const r = await run({ modules: { 'f.js': FETCHER }, egress: toolRules(), as: 'agent-tools',
    input: { url: `http://127.0.0.1:${P}/tool/x` } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /not granted to worker agent-tools/);
});

test('egress: bad rules, an unknown or missing "as", an ungranted secret: 400 naming the key', async () => {
  const base = { modules: { 'f.js': FETCHER }, input: {} };
  const cases = [
    [{ egress: { match: 'x' } }, 'egress', /must be an array of rules/],
    [{ egress: [{ match: 'ftp://example.com/' }] }, 'egress', /^egress\[0\]\.match: the scheme must be http or https$/],
    [{ egress: [{ match: 'https://api.example.com/*', bogus: 1 }] }, 'egress', /^egress\[0\]: unknown member "bogus"/],
    [{ egress: toolRules('NO_SUCH') }, 'egress', /no grants of its own: name with "as"/],
    [{ egress: toolRules('NO_SUCH'), as: 'agent-tools' }, 'egress', /secret NO_SUCH is not granted to worker agent-tools/],
    [{ egress: toolRules(), as: 'nobody-here' }, 'as', /unknown worker nobody-here/],
    [{ egress: toolRules(), as: 'Bad Name' }, 'as', /must be a worker name/],
    [{ as: 'agent-tools' }, 'as', /give the rules too/],
  ];
  for (const [extra, key, why] of cases) {
    const r = await run({ ...base, ...extra });
    assert.equal(r.status, 400, `${JSON.stringify(extra)}: ${r.text}`);
    assert.equal(r.json.key, key, r.text);
    assert.match(r.json.error, why);
  }
});

// ---- facet: an agent's memory that outlives the sandbox ----

const COUNTER = `export function run(input, env) {
  env.DB.exec('CREATE TABLE IF NOT EXISTS memory (k TEXT PRIMARY KEY, v INTEGER)');
  env.DB.exec("INSERT INTO memory VALUES ('runs', 1) ON CONFLICT(k) DO UPDATE SET v = v + 1");
  return env.DB.exec("SELECT v FROM memory WHERE k = 'runs'").one().v;
}`;

test('facet: a named facet keeps state across runs, is listed, and deleted', async () => {
  const body = { modules: { 'c.js': COUNTER }, facet: 'agent-1', input: {} };
  let r = await run(body);
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.result, 1);
  r = await run(body);
  assert.equal(r.json.result, 2, 'the second run sees the first one\'s write');
  // another name is another facet
  r = await run({ ...body, facet: 'agent_2' });
  assert.equal(r.json.result, 1);
  assert.ok(fs.existsSync(path.join(node.dataDir, 'facets/_run/agent-1.sqlite')));
  const list = await node.control('GET', '/v1/run/facets');
  assert.equal(list.status, 200, list.text);
  const ids = list.json.facets.map((f) => f.id).sort();
  assert.deepEqual(ids, ['agent-1', 'agent_2']);
  assert.ok(list.json.facets.every((f) => f.size_bytes > 0), list.text);
  const del = await node.control('DELETE', '/v1/run/facets/agent-1');
  assert.equal(del.status, 200, del.text);
  assert.deepEqual(del.json, { deleted: 'agent-1' });
  assert.equal((await node.control('DELETE', '/v1/run/facets/agent-1')).status, 404);
  r = await run(body);
  assert.equal(r.json.result, 1, 'a deleted facet starts empty');
  // a facet gives no fetch(): that takes egress rules
  r = await run({ modules: { 'f.js': FETCHER }, facet: 'agent_2', input: { url: `http://127.0.0.1:${P}/tool/x` } });
  assert.match(r.json.result.error, /cannot make host calls/, r.text);
  // without a facet, env.DB does not exist
  r = await run({ modules: { 'c.js': `export function run(i, env) { return typeof env.DB; }` }, input: {} });
  assert.equal(r.json.result, 'undefined');
});

test('facet: its own size limit, limits.facet_mb', async () => {
  const r = await run({ modules: { 'c.js': `export function run(input, env) {
    env.DB.exec('CREATE TABLE IF NOT EXISTS big (b BLOB)');
    try { for (let i = 0; i < 40; i++) env.DB.exec('INSERT INTO big VALUES (randomblob(100000))'); }
    catch (err) { return String(err.message); }
    return 'all stored';
  }` }, facet: 'small', limits: { facet_mb: 1 }, input: {} });
  // Writes are made durable when the run's JavaScript yields (the output
  // gate), so the limit is met there, and the run's answer says so.
  assert.equal(r.status, 500, r.text);
  assert.match(r.json.error, /facet is full: its size limit is 1 MB/);
});

test('facet: bad names are 400 before any code runs; the routes check theirs', async () => {
  for (const facet of ['', '../x', 'a/b', 'x'.repeat(65), 7, 'sp ace']) {
    const r = await run({ modules: { 'c.js': COUNTER }, facet, input: {} });
    assert.equal(r.status, 400, `${JSON.stringify(facet)}: ${r.text}`);
    assert.equal(r.json.key, 'facet');
  }
  assert.equal((await node.control('DELETE', '/v1/run/facets/..%2Fx')).status, 400);
  assert.equal((await node.control('DELETE', '/v1/run/facets/nope')).status, 404);
  assert.equal((await node.control('POST', '/v1/run/facets')).status, 405);
});

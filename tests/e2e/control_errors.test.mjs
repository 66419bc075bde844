// Every way a control API call can be wrong gets a clear JSON error with a
// fitting status, and changes no state. The token is never logged.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { statSync } from 'node:fs';
import path from 'node:path';
import { EDGECTL, hasFlag, rawRequest, runProcess, startNode, tempDir, writeFile } from './lib/node.mjs';

let node;

before(async () => {
  // debug logging (when available) gives a leaked token the most chances to show
  const extraArgs = hasFlag('--log-level') ? ['--log-level', 'debug'] : [];
  node = await startNode({ workers: 2, extraArgs });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

const GOOD = `export default { fetch() { return new Response("good v1"); } };\n`;

function assertJsonError(r, status, what) {
  assert.equal(r.status, status, `${what}: expected ${status}, got ${r.status} ${r.text}`);
  assert.match(r.headers['content-type'] ?? '', /application\/json/, `${what}: JSON content type`);
  assert.ok(r.json && typeof r.json.error === 'string' && r.json.error.length > 0,
    `${what}: body {"error": "..."}: ${r.text}`);
  return r.json;
}

test('missing token -> 401', async () => {
  for (const [method, p] of [['GET', '/v1/workers'], ['GET', '/v1/node'], ['PUT', '/v1/workers/x'], ['DELETE', '/v1/workers/x']]) {
    const r = await node.control(method, p, { token: null, body: method === 'PUT' ? GOOD : undefined,
      headers: method === 'PUT' ? { 'content-type': 'application/javascript' } : {} });
    assertJsonError(r, 401, `${method} ${p} without token`);
  }
  // nothing was deployed by the refused PUT
  const list = await node.control('GET', '/v1/workers/x');
  assert.equal(list.status, 404);
});

test('wrong token -> 401', async () => {
  const wrong = [
    'not-the-token',
    `${node.token}x`,
    node.token.slice(0, -1),
    node.token.toUpperCase() === node.token ? node.token.toLowerCase() : node.token.toUpperCase(),
  ];
  for (const tok of wrong) {
    const r = await node.control('GET', '/v1/workers', { token: tok });
    assertJsonError(r, 401, `token ${JSON.stringify(tok)}`);
  }
  // other schemes and malformed headers
  for (const auth of [`Basic ${node.token}`, `Bearer`, `Bearer  ${node.token}x`, node.token]) {
    const r = await node.control('GET', '/v1/workers', { token: null, headers: { authorization: auth } });
    assertJsonError(r, 401, `Authorization: ${auth.replace(node.token, '<token>')}`);
  }
});

test('bad worker name -> 400', async () => {
  for (const name of ['Upper', '-leading-dash', 'under_score', 'dot.name', 'a'.repeat(64), '%20space']) {
    const r = await node.deploy(name, GOOD);
    assertJsonError(r, 400, `name ${JSON.stringify(name)}`);
  }
  const ok = await node.deploy('a'.repeat(63), GOOD);
  assert.ok(ok.status === 200 || ok.status === 201, `63-char name accepted: ${ok.status} ${ok.text}`);
  const ok2 = await node.deploy('0-digit-first', GOOD);
  assert.ok(ok2.status === 200 || ok2.status === 201, `digit-first name accepted: ${ok2.status} ${ok2.text}`);
});

test('syntax error -> 400 with message, module, line and column', async () => {
  // line 3, the stray ')' is at column 29 (1-based, as editors and V8 stack traces count)
  const src = [
    'export default {',
    '  fetch() {',
    '    return new Response("x"));',
    '  }',
    '};',
    '',
  ].join('\n');
  const r = await node.deploy('syntax', { 'index.js': src }, { main: 'index.js' });
  const err = assertJsonError(r, 400, 'syntax error');
  assert.match(err.error, /SyntaxError/, `message: ${r.text}`);
  assert.match(err.error, /Unexpected token '\)'/, `message: ${r.text}`);
  assert.equal(err.module, 'index.js', `module: ${r.text}`);
  assert.equal(err.line, 3, `line: ${r.text}`);
  assert.equal(err.column, 29, `column (1-based): ${r.text}`);

  // the same for a module that is not the main one
  const lib = ['export const a = 1;', 'export const b = [1, 2;', ''].join('\n');
  const r2 = await node.deploy('syntax', {
    'index.js': `import { a } from './lib.js';\nexport default { fetch() { return new Response(String(a)); } };\n`,
    'lib.js': lib,
  }, { main: 'index.js' });
  const err2 = assertJsonError(r2, 400, 'syntax error in an imported module');
  assert.match(err2.error, /SyntaxError/);
  assert.equal(err2.module, 'lib.js', `module: ${r2.text}`);
  assert.equal(err2.line, 2, `line: ${r2.text}`);
  assert.equal(err2.column, 23, `column (1-based): ${r2.text}`);

  // and for a single application/javascript module
  const r3 = await node.deploy('syntax', src);
  const err3 = assertJsonError(r3, 400, 'syntax error (application/javascript)');
  assert.equal(err3.line, 3, `line: ${r3.text}`);
  assert.equal(err3.column, 29, `column: ${r3.text}`);
  assert.equal(typeof err3.module, 'string');

  const show = await node.control('GET', '/v1/workers/syntax');
  assert.equal(show.status, 404, 'nothing deployed');
});

test('no default export, or one without fetch -> 400', async () => {
  const cases = {
    'no default export': 'export const fetch = () => new Response("x");\n',
    'default export without fetch': 'export default { hello() { return 1; } };\n',
    'fetch is not a function': 'export default { fetch: 42 };\n',
    'default export is a number': 'export default 42;\n',
  };
  for (const [what, src] of Object.entries(cases)) {
    const r = await node.deploy('nofetch', src);
    assertJsonError(r, 400, what);
  }
  assert.equal((await node.control('GET', '/v1/workers/nofetch')).status, 404);
});

test('link error and top-level exception -> 400', async () => {
  const link = await node.deploy('linkerr', {
    'index.js': `import { x } from './missing.js';\nexport default { fetch() { return new Response(x); } };\n`,
  });
  const e1 = assertJsonError(link, 400, 'import of a missing module');
  assert.match(JSON.stringify(e1), /missing\.js/, `names the missing module: ${link.text}`);

  const thrown = await node.deploy('toplevel', `throw new Error("top-level boom");\nexport default { fetch() {} };\n`);
  const e2 = assertJsonError(thrown, 400, 'exception at module evaluation');
  assert.match(e2.error, /top-level boom/);
});

test('bad JSON deploys -> 400', async () => {
  const bad = await node.control('PUT', '/v1/workers/badjson', {
    body: '{"main_module": "index.js", "modules": {',
    headers: { 'content-type': 'application/json' },
  });
  assertJsonError(bad, 400, 'invalid JSON');
  const empty = await node.control('PUT', '/v1/workers/badjson', { body: '', headers: { 'content-type': 'application/json' } });
  assert.match(assertJsonError(empty, 400, 'empty body').error, /^the body is empty/);

  const unknownKey = await node.control('PUT', '/v1/workers/badjson', {
    body: { main_module: 'index.js', modules: { 'index.js': GOOD }, colour: 'blue' },
  });
  const e = assertJsonError(unknownKey, 400, 'unknown top-level key');
  assert.match(JSON.stringify(e), /colour/, `names the key: ${unknownKey.text}`);

  const cases = {
    'main_module not among modules': { main_module: 'main.js', modules: { 'index.js': GOOD } },
    'no modules': { main_module: 'index.js', modules: {} },
    'module source not a string': { main_module: 'index.js', modules: { 'index.js': 42 } },
    'body is an array': [1, 2],
    'negative cpu limit': { main_module: 'index.js', modules: { 'index.js': GOOD }, limits: { cpu_ms: -5 } },
  };
  for (const [what, body] of Object.entries(cases)) {
    const r = await node.control('PUT', '/v1/workers/badjson', { body });
    assertJsonError(r, 400, what);
  }
  assert.equal((await node.control('GET', '/v1/workers/badjson')).status, 404);
});

test('script over 10 MiB -> 413', async () => {
  const big = `export default { fetch() { return new Response("big"); } };\n//${'x'.repeat(10 * 1024 * 1024)}\n`;
  const r = await node.deploy('big', big);
  assertJsonError(r, 413, 'script of 10 MiB + 64 bytes');

  // JSON deploy whose modules add up to more than 10 MiB
  const half = `//${'y'.repeat(5 * 1024 * 1024 + 100)}\n`; // total > 10 MiB, body < the HTTP cap
  const r2 = await node.deploy('big', { 'index.js': `import './a.js';\nimport './b.js';\n${GOOD}`, 'a.js': half, 'b.js': half });
  assert.equal(r2.status, 413, `JSON modules over 10 MiB: ${r2.status} ${r2.text.slice(0, 200)}`);

  // a declared length far beyond the limit is refused without reading the body
  const raw = await rawRequest(node.controlPort,
    `PUT /v1/workers/big HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${node.token}\r\n` +
    `Content-Type: application/javascript\r\nContent-Length: 1000000000\r\n\r\n${'z'.repeat(1000)}`,
    { timeout: 5000 });
  assert.match(raw.text, /^HTTP\/1\.1 413 /, `huge declared length: ${raw.text.slice(0, 200)}`);
  assert.equal((await node.control('GET', '/v1/workers/big')).status, 404);
});

test('without the token, a large body is refused before it is sent', async () => {
  // 20 MB announced (under the body limit), only 1000 bytes sent: the 401
  // must come from the head alone, not after the node waited for the rest.
  for (const [auth, te] of [['', 'Content-Length: 20000000'], ['Authorization: Bearer wrong\r\n', 'Content-Length: 20000000'],
    ['', 'Transfer-Encoding: chunked']]) {
    const body = te.startsWith('Transfer') ? `3e8\r\n${'z'.repeat(1000)}\r\n` : 'z'.repeat(1000);
    const raw = await rawRequest(node.controlPort,
      `PUT /v1/workers/unauth HTTP/1.1\r\nHost: x\r\n${auth}Content-Type: application/javascript\r\n${te}\r\n\r\n${body}`,
      { timeout: 10000 });
    assert.match(raw.text, /^HTTP\/1\.1 401 /, `${auth || 'no token'}, ${te}: ${raw.text.slice(0, 200)}`);
    assert.match(raw.text, /missing or invalid bearer token/);
  }
  assert.equal((await node.control('GET', '/v1/workers/unauth')).status, 404);
  // with the token, large and chunked bodies are read and deployed as before
  const padded = `${GOOD}//${'p'.repeat(200 * 1024)}\n`;
  const r = await node.control('PUT', '/v1/workers/padded', { body: padded,
    headers: { 'content-type': 'application/javascript' } });
  assert.equal(r.status, 201, `200 KiB script with the token: ${r.status} ${r.text.slice(0, 200)}`);
  const chunked = await rawRequest(node.controlPort,
    `PUT /v1/workers/padded HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${node.token}\r\n` +
    `Content-Type: application/javascript\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n` +
    `${Buffer.byteLength(padded).toString(16)}\r\n${padded}\r\n0\r\n\r\n`, { timeout: 15000 });
  assert.match(chunked.text, /^HTTP\/1\.1 200 /, `chunked 200 KiB with the token: ${chunked.text.slice(0, 200)}`);
  assert.match(chunked.text, /"version":2/);
  // the health checks still answer whatever body comes with them
  const health = await rawRequest(node.controlPort,
    `GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 20000000\r\n\r\n${'z'.repeat(1000)}`, { timeout: 10000 });
  assert.match(health.text, /^HTTP\/1\.1 200 /, `healthz with a body: ${health.text.slice(0, 200)}`);
});

test('facet routes: wrong method -> 405, bad name -> 400 like the other worker routes', async () => {
  for (const sub of ['facet', 'facet/backup']) {
    const m = await node.control('POST', `/v1/workers/Bad_Name/${sub}`, { body: '{}' });
    assertJsonError(m, 405, `POST ${sub}`);
    assert.equal(m.headers.allow, 'GET');
    const e = assertJsonError(await node.control('GET', `/v1/workers/Bad_Name/${sub}`), 400, `GET ${sub}`);
    assert.equal(e.error, 'invalid worker name: must match [a-z0-9][a-z0-9-]{0,62}');
    assert.equal(e.name, 'Bad_Name');
  }
});

test('edgectl: credentials in --node are refused without echoing them', async () => {
  const r = await runProcess(EDGECTL, ['--node', `http://admin:hunter2@127.0.0.1:${node.controlPort}`,
    '--token-file', node.tokenFile, 'list']);
  assert.equal(r.code, 2, `exit status: ${r.code} ${r.stderr}`);
  assert.match(r.stderr, /user name or password in the URL is not supported/);
  assert.doesNotMatch(r.stderr, /hunter2/);
  assert.doesNotMatch(r.stderr, /IPv6/);
});

test('unknown route -> 404, wrong method -> 405', async () => {
  for (const p of ['/v1/nope', '/nope', '/v1/workers/a/b/c', '/v2/workers']) {
    assertJsonError(await node.control('GET', p), 404, `GET ${p}`);
  }
  for (const [method, p] of [['POST', '/v1/workers/x'], ['PATCH', '/v1/workers/x'], ['POST', '/v1/node'],
    ['DELETE', '/v1/workers'], ['PUT', '/v1/workers'], ['DELETE', '/v1/node']]) {
    assertJsonError(await node.control(method, p, { body: method === 'GET' ? undefined : '{}' }), 405, `${method} ${p}`);
  }
});

test('DELETE of an unknown worker -> 404', async () => {
  const r = await node.control('DELETE', '/v1/workers/never-deployed');
  const e = assertJsonError(r, 404, 'DELETE unknown');
  assert.match(JSON.stringify(e), /never-deployed|unknown/);
  assertJsonError(await node.control('GET', '/v1/workers/never-deployed'), 404, 'GET unknown');
});

test('a refused redeploy changes nothing', async () => {
  const first = await node.deployOk('keep', GOOD);
  const bad = await node.deploy('keep', 'export default { fetch() { return new Response("v2") } ;\n');
  assertJsonError(bad, 400, 'broken redeploy');
  const show = await node.control('GET', '/v1/workers/keep');
  assert.equal(show.json.version, first.json.version, 'version unchanged');
  const res = await node.ingress('keep', '/');
  assert.equal(res.text, 'good v1');
});

test('egress rules: an empty body is refused saying so', async () => {
  await node.deployOk('rules-empty', `export default { fetch() { return new Response('x'); } };`);
  const r = await node.control('PUT', '/v1/workers/rules-empty/egress', {
    body: '', headers: { 'content-type': 'application/json' },
  });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /^the body is empty/);
  // a misspelt key would have cleared every rule
  const typo = await node.control('PUT', '/v1/workers/rules-empty/egress', { body: { rule: [] } });
  assert.equal(typo.status, 400, typo.text);
  assert.equal(typo.json.key, 'rule');
  const ok = await node.control('PUT', '/v1/workers/rules-empty/egress', { body: { rules: [] } });
  assert.equal(ok.status, 200, ok.text);
});

test('a tenant name that is not a worker name: 400 naming it, as on /v1/workers', async () => {
  const r = await node.control('GET', '/v1/tenants/Bad_Name');
  assert.equal(r.status, 400, r.text);
  assert.equal(r.json.name, 'Bad_Name');
  assert.match(r.json.error, /^invalid worker name/);
  assert.equal((await node.control('GET', '/v1/tenants/nobody-here')).status, 404);
});

test('a run on a drained node: 503, the node is shutting down (not "try again")', async (t) => {
  const other = await startNode({ workers: 1 });
  t.after(() => other.stop());
  assert.equal((await other.control('POST', '/v1/node/drain')).status, 202);
  const r = await other.control('POST', '/v1/run', {
    body: { modules: { 'a.js': `export default { fetch() { return new Response('x'); } };` } },
  });
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.error, 'the node is shutting down');
});

test('the token file: created 0600 with a random value; --control-token-file is used', async (t) => {
  const st = statSync(path.join(node.dataDir, 'control.token'));
  assert.equal(st.mode & 0o777, 0o600, `mode ${(st.mode & 0o777).toString(8)}`);
  assert.ok(node.token.length >= 32, `token of ${node.token.length} chars`);

  const dir = tempDir();
  const tokenFile = writeFile(dir, 'my.token', 'my-own-secret-token-0123456789abcdef\n');
  const other = await startNode({ workers: 1, extraArgs: ['--control-token-file', tokenFile] });
  t.after(() => other.stop({ clean: true }));
  assert.notEqual(other.token, node.token);
  const ok = await other.control('GET', '/v1/workers', { token: 'my-own-secret-token-0123456789abcdef' });
  assert.equal(ok.status, 200, ok.text);
  const no = await other.control('GET', '/v1/workers', { token: node.token });
  assert.equal(no.status, 401);
});

test('the token never appears in the logs', async () => {
  // give late log lines a moment to arrive
  await new Promise((r) => setTimeout(r, 200));
  assert.ok(node.logs.length > 0, 'the node logged something');
  const leaks = node.logs.filter((l) => l.raw.includes(node.token) ||
    l.raw.includes(node.token.slice(0, 16)) || l.raw.includes('not-the-token'));
  assert.deepEqual(leaks.map((l) => l.raw), [], 'log lines containing a token');
});

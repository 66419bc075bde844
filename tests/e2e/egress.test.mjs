// Outbound fetch() through the egress process, against real local upstreams:
// plain HTTP and TLS with a certificate authority made for the test. Covers
// the allow-list (hosts, methods, paths, wildcards), credential injection and
// its redaction, secrets, the SSRF rules, redirects, failing upstreams,
// limits, streaming, abort, and the egress process being killed.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runEdgenode, sleep, startNode, tempDir, waitFor, writeFile } from './lib/node.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLIENT = readFileSync(path.join(here, 'fixtures/egress/client.js'), 'utf8');

const API_TOKEN = `tok-${randomBytes(8).toString('hex')}`;
const API_KEY = `key-${randomBytes(8).toString('hex')}`;
const ROTATED = `rot-${randomBytes(8).toString('hex')}`;
const SECRET_VALUES = [API_TOKEN, API_KEY, ROTATED];
// Room for sanitizer builds; CPU limits are not what this file tests.
const LIMITS = { cpu_ms: 2000 };

// ---- upstreams -------------------------------------------------------------

const state = { active: 0, maxActive: 0, counts: {}, release: null, hangs: [], closed: [] };

function track(req, res) {
  state.active++;
  state.maxActive = Math.max(state.maxActive, state.active);
  res.on('close', () => { state.active--; });
}

async function readBody(req) {
  const parts = [];
  for await (const c of req) parts.push(c);
  return Buffer.concat(parts).toString();
}

async function route(req, res) {
  const url = new URL(req.url, 'http://x');
  const p = url.pathname;
  if (p.startsWith('/echo/') || p === '/forbidden') {
    const body = await readBody(req);
    res.setHeader('content-type', 'application/json');
    res.setHeader('x-echo', 'yes');
    res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body }));
    return;
  }
  if (p === '/x/redirect') {
    res.writeHead(Number(url.searchParams.get('status') ?? 302),
      { location: url.searchParams.get('to') });
    res.end('moving');
    return;
  }
  if (p === '/x/hang' || p === '/stall') {
    state.hangs.push(req.url);
    req.socket.on('close', () => state.closed.push(req.url));
    return; // never answers
  }
  if (p === '/stall-body') {
    res.writeHead(200, { 'content-length': 1000 });
    res.write('partial');
    return;
  }
  if (p === '/x/reset') {
    if (req.socket.resetAndDestroy) req.socket.resetAndDestroy();
    else req.socket.destroy();
    return;
  }
  if (p === '/x/malformed') {
    req.socket.end('HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\nhello');
    return;
  }
  if (p === '/x/latin1-reason') {
    req.socket.end(Buffer.from('HTTP/1.1 200 \xe9t\xe9 ok\r\nContent-Length: 2\r\nX-Word: caf\xe9\r\n\r\nok', 'latin1'));
    return;
  }
  if (p === '/x/badname') {
    // A header name Headers refuses, and a body that has not ended.
    req.socket.write('HTTP/1.1 200 OK\r\nX-Bad Name: v\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n');
    return;
  }
  if (p === '/x/port') {
    res.end(String(req.socket.remotePort));
    return;
  }
  if (p === '/x/large') {
    // 3 MiB in 64 KiB writes, waiting for the socket to drain
    res.writeHead(200, { 'content-type': 'application/octet-stream' });
    const chunk = Buffer.alloc(65536, 'abcdefgh');
    let left = 48;
    const more = () => {
      while (left > 0) {
        left--;
        if (!res.write(chunk)) return res.once('drain', more);
      }
      res.end();
    };
    more();
    return;
  }
  if (p === '/big') {
    res.end('x'.repeat(Number(url.searchParams.get('n'))));
    return;
  }
  if (p === '/x/slow') {
    track(req, res);
    setTimeout(() => res.end('slow done'), Number(url.searchParams.get('ms') ?? 200));
    return;
  }
  if (p === '/x/count') {
    const k = url.searchParams.get('k') ?? '';
    state.counts[k] = (state.counts[k] ?? 0) + 1;
    res.end(String(state.counts[k]));
    return;
  }
  if (p === '/x/stream') {
    // The second chunk goes out only after /x/release: a worker that got the
    // first chunk before the whole body can ask for it; one that waits for
    // the whole body never gets it.
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('first;');
    state.release = () => res.end('second');
    return;
  }
  if (p === '/x/release') {
    const go = state.release;
    state.release = null;
    if (go) go();
    res.end(go ? 'released' : 'nothing to release');
    return;
  }
  res.writeHead(404);
  res.end('no such route');
}

function listen(server) {
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}

// ---- a certificate authority for the test ---------------------------------

function openssl(args, cwd) {
  const r = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl ${args.join(' ')}: ${r.stderr}`);
}

function makeCerts() {
  const dir = tempDir('edgenode-egress-ca-');
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2',
    '-subj', '/CN=edgenode egress test CA'], dir);
  const leaf = (name, san, signer) => {
    writeFile(dir, `${name}.ext`, `subjectAltName=${san}\n`);
    if (signer) {
      openssl(['req', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`], dir);
      openssl(['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key',
        '-CAcreateserial', '-out', `${name}.pem`, '-days', '2', '-extfile', `${name}.ext`], dir);
    } else {
      openssl(['req', '-x509', ...ec, '-keyout', `${name}.key`, '-out', `${name}.pem`, '-days', '2',
        '-subj', `/CN=${name}`, '-addext', `subjectAltName=${san}`], dir);
    }
    return { key: readFileSync(path.join(dir, `${name}.key`)), cert: readFileSync(path.join(dir, `${name}.pem`)) };
  };
  return {
    ca: path.join(dir, 'ca.pem'),
    good: leaf('good', 'DNS:localhost,IP:127.0.0.1', true),
    wrong: leaf('wrong', 'DNS:other.example', true),
    self: leaf('self', 'DNS:localhost,IP:127.0.0.1', false),
  };
}

// ---- the node ---------------------------------------------------------------

let node;
let P; // the plain upstream's port
let TLS = {}; // name -> port
const servers = [];

function rulesFor() {
  const u = `http://127.0.0.1:${P}`;
  return [
    {
      match: `${u}/echo/*`, methods: ['GET', 'POST', 'HEAD'],
      inject: { headers: { Authorization: 'Bearer ${secret:API_TOKEN}', 'X-Api-Key': '${secret:API_KEY}' } },
    },
    { match: `${u}/stall*`, timeout_ms: 800 },
    { match: `${u}/big`, max_response_bytes: 4096 },
    { match: `${u}/x/large`, max_response_bytes: 8 << 20 },
    { match: `${u}/x/*`, methods: ['GET', 'POST'] },
    { match: `http://localhost:${P}/echo/*` },
    { match: `https://localhost:${TLS.good}/` },
    { match: `https://127.0.0.1:${TLS.good}/` },
    { match: `https://localhost:${TLS.wrong}/` },
    { match: `https://localhost:${TLS.self}/` },
    { match: `http://127.0.0.2:${P}/` },
    { match: `http://[::1]:${P}/` },
    { match: `http://[::ffff:7f00:2]:${P}/` },
    { match: 'http://169.254.169.254/latest/*' },
    { match: `http://0.0.0.0:${P}/` },
    { match: 'https://*.example.com/' },
  ];
}

function call(spec, worker = 'c1') {
  return node.ingress(worker, '/', {
    method: 'POST', body: JSON.stringify(spec), headers: { 'content-type': 'application/json' },
  }).then((r) => {
    assert.equal(r.status, 200, `worker answered ${r.status}: ${r.text}`);
    return r.json;
  });
}

async function grant(name, worker) {
  const r = await node.control('PUT', `/v1/secrets/${name}/workers/${worker}`);
  assert.equal(r.status, 200, `grant ${name} to ${worker}: ${r.status} ${r.text}`);
}

async function putSecret(name, value) {
  const r = await node.control('PUT', `/v1/secrets/${name}`, { body: value, headers: { 'content-type': 'text/plain' } });
  assert.ok(r.status === 200 || r.status === 201, `PUT secret ${name}: ${r.status} ${r.text}`);
  return r;
}

before(async () => {
  const certs = makeCerts();
  const plain = http.createServer((req, res) => { route(req, res).catch(() => res.destroy()); });
  servers.push(plain);
  P = await listen(plain);
  for (const name of ['good', 'wrong', 'self']) {
    const s = https.createServer(certs[name], (req, res) => res.end(`tls ${name} ${req.headers.host}`));
    servers.push(s);
    TLS[name] = await listen(s);
  }
  node = await startNode({
    workers: 1,
    extraArgs: ['--egress-allow-cidr', '127.0.0.1/32', '--ca-file', certs.ca],
  });
  await putSecret('API_TOKEN', `${API_TOKEN}\n`);
  await putSecret('API_KEY', API_KEY);
  for (const s of ['API_TOKEN', 'API_KEY']) for (const w of ['c1', 'lim']) await grant(s, w);
  const r = await node.control('PUT', '/v1/workers/c1', {
    body: { modules: { 'index.js': CLIENT }, egress: rulesFor(), limits: LIMITS },
  });
  assert.equal(r.status, 201, r.text);
  assert.equal(r.json.egress.length, rulesFor().length, 'the deploy answer shows the rules');
});

after(async () => {
  if (node) {
    // Nothing a worker can see or an operator can read may hold a secret.
    for (const l of node.logs) {
      for (const v of SECRET_VALUES) assert.ok(!l.raw.includes(v), `a log line holds a secret: ${l.raw}`);
    }
    await node.stop({ clean: true });
  }
  for (const s of servers) s.close();
});

// ---- policy ---------------------------------------------------------------

test('allowed host, method and path: the response comes back whole', async () => {
  const r = await call({ url: `http://127.0.0.1:${P}/echo/items?id=3` });
  assert.equal(r.ok, true, JSON.stringify(r));
  assert.equal(r.status, 200);
  assert.equal(r.url, `http://127.0.0.1:${P}/echo/items?id=3`);
  assert.equal(r.redirected, false);
  const echo = JSON.parse(r.body);
  assert.equal(echo.method, 'GET');
  assert.equal(echo.url, '/echo/items?id=3');
  assert.ok(r.headers.some(([k, v]) => k === 'x-echo' && v === 'yes'), JSON.stringify(r.headers));

  const post = await call({ url: `http://127.0.0.1:${P}/echo/new`, init: { method: 'POST', body: 'hello body', headers: { 'content-type': 'text/x-test' } } });
  const pe = JSON.parse(post.body);
  assert.equal(pe.method, 'POST');
  assert.equal(pe.body, 'hello body');
  assert.equal(pe.headers['content-type'], 'text/x-test');
  assert.equal(pe.headers['content-length'], '10');

  const head = await call({ url: `http://127.0.0.1:${P}/echo/h`, init: { method: 'HEAD' } });
  assert.equal(head.status, 200);
  assert.equal(head.body, '');
});

test('denied hosts, methods and paths reject with a TypeError naming the host, logged with tenant and request id', async () => {
  const from = node.logs.length;
  const host = await call({ url: 'https://api.elsewhere.test/v1/x' });
  assert.deepEqual([host.ok, host.name], [false, 'TypeError']);
  assert.equal(host.message, 'egress denied: api.elsewhere.test is not allowed for this worker');

  const method = await call({ url: `http://127.0.0.1:${P}/echo/x`, init: { method: 'DELETE' } });
  assert.equal(method.name, 'TypeError');
  assert.match(method.message, new RegExp(`^egress denied: DELETE 127\\.0\\.0\\.1:${P}/echo/x is not allowed for this worker$`));

  const p = await call({ url: `http://127.0.0.1:${P}/admin` });
  assert.equal(p.message, `egress denied: 127.0.0.1:${P}/admin is not allowed for this worker`);
  // dot segments do not get around a path rule
  const dots = await call({ url: `http://127.0.0.1:${P}/echo/../admin` });
  assert.match(dots.message, /^egress denied: .*\/admin is not allowed/);
  // another port on an allowed address
  const port = await call({ url: `http://127.0.0.1:${P + 1 === 65536 ? 1 : P + 1}/echo/x` });
  assert.match(port.message, /^egress denied: 127\.0\.0\.1:\d+ is not allowed for this worker$/);
  // a scheme fetch() cannot load
  const ftp = await call({ url: 'ftp://127.0.0.1/' });
  assert.equal(ftp.name, 'TypeError');

  const line = await node.waitForLog((l) => l.json?.msg === 'egress denied: api.elsewhere.test', { from, what: 'the denial log line' });
  assert.equal(line.json.tenant, 'c1');
  assert.match(line.json.request_id, /^[0-9a-f]{16}$/);
  assert.equal(line.json.level, 'warn');
});

test('TRACE, TRACK and CONNECT never leave: an upstream that echoes TRACE would hand back injected credentials', async () => {
  for (const method of ['TRACE', 'track', 'CONNECT']) {
    const r = await call({ url: `http://127.0.0.1:${P}/echo/x`, init: { method } });
    assert.deepEqual([r.ok, r.name], [false, 'TypeError'], JSON.stringify(r));
    assert.equal(r.message, `'${method.toUpperCase()}' HTTP method is unsupported.`);
  }
});

test('a URL with a password is refused, and neither the error nor the log repeats the password', async () => {
  const from = node.logs.length;
  const r = await call({ url: `http://someone:hunter2pw@127.0.0.1:${P}/echo/x` });
  assert.deepEqual([r.ok, r.name], [false, 'TypeError'], JSON.stringify(r));
  assert.match(r.message, /credentials/);
  assert.ok(!r.message.includes('hunter2pw'), r.message);
  assert.ok(r.message.includes(`127.0.0.1:${P}/echo/x`), r.message);
  await node.waitForLog((l) => /credentials/.test(l.json?.msg ?? ''), { from, what: 'the refusal log line' });
  for (const l of node.logs.slice(from)) assert.ok(!l.raw.includes('hunter2pw'), l.raw);
});

test('an incoming request sent on as it is hands a redirect to the client (its redirect mode is manual, as in Workers)', async () => {
  const target = `http://127.0.0.1:${P}/x/redirect?to=${encodeURIComponent('/echo/after')}`;
  const r = await node.ingress('c1', `/forward?url=${encodeURIComponent(target)}`);
  assert.equal(r.status, 302, r.text);
  assert.equal(r.headers.location, '/echo/after');
});

test('a fetched response\'s headers are immutable, as in Workers; a copy\'s are not', async () => {
  const r = await call({ url: `http://127.0.0.1:${P}/echo/x`, mutate: true });
  assert.equal(r.mutate, "TypeError: Can't modify immutable headers.");
  assert.equal(r.cloneMutate, "TypeError: Can't modify immutable headers.");
  assert.equal(r.copyMutate, 'changed');
});

test('a Latin-1 reason phrase reaches statusText as Latin-1, as header values do', async () => {
  const r = await call({ url: `http://127.0.0.1:${P}/x/latin1-reason` });
  assert.equal(r.status, 200, JSON.stringify(r));
  assert.equal(r.statusText, '\u00e9t\u00e9 ok');
  assert.ok(r.headers.some(([k, v]) => k === 'x-word' && v === 'caf\u00e9'), JSON.stringify(r.headers));
  assert.equal(r.body, 'ok');
});

test('a header value with a control character fails the fetch naming the header', async () => {
  const r = await call({ url: `http://127.0.0.1:${P}/echo/x`, init: { headers: { 'x-ctl': 'a\u0001b' } } });
  assert.deepEqual([r.ok, r.name], [false, 'TypeError'], JSON.stringify(r));
  assert.match(r.message, /the value of header "x-ctl" has a control character/);
});

test('a ".." behind an encoded slash does not get around a path rule', async () => {
  for (const p of ['/echo/..%2fadmin', '/echo/%2e%2e%2Fadmin', '/echo/x%5c..%5cadmin']) {
    const r = await call({ url: `http://127.0.0.1:${P}${p}` });
    assert.equal(r.ok, false, `${p}: ${JSON.stringify(r)}`);
    assert.equal(r.name, 'TypeError');
    assert.match(r.message, /"\.\." segment next to an encoded slash/, p);
  }
  // An encoded slash inside a name is left alone (as some APIs use it).
  const ok = await call({ url: `http://127.0.0.1:${P}/echo/group%2Fname` });
  assert.equal(ok.status, 200, JSON.stringify(ok));
  assert.equal(JSON.parse(ok.body).url, '/echo/group%2Fname');
});

test('wildcard rules: "*.example.com" covers subdomains but not the apex or look-alikes', async () => {
  const apex = await call({ url: 'https://example.com/' });
  assert.equal(apex.message, 'egress denied: example.com is not allowed for this worker');
  const lookalike = await call({ url: 'https://badexample.com/' });
  assert.match(lookalike.message, /^egress denied: badexample\.com/);
  const suffix = await call({ url: 'https://a.example.com.evil.test/' });
  assert.match(suffix.message, /^egress denied: a\.example\.com\.evil\.test/);
  // A subdomain passes the policy: what stops it now is only that the test
  // machine cannot resolve it (or reach it), not the allow-list.
  const sub = await call({ url: 'https://no-such-host-for-edgenode-tests.example.com/' });
  assert.equal(sub.ok, false);
  assert.doesNotMatch(sub.message, /egress denied/);
});

test('rules can be read and replaced without a redeploy; invalid rules are refused', async () => {
  const get = await node.control('GET', '/v1/workers/c1/egress');
  assert.equal(get.status, 200, get.text);
  assert.equal(get.json.rules.length, rulesFor().length);
  assert.ok(get.text.includes('${secret:API_TOKEN}'), 'templates, not values');

  const put = await node.control('PUT', '/v1/workers/c1/egress', { body: [{ match: `http://127.0.0.1:${P}/x/count` }] });
  assert.equal(put.status, 200, put.text);
  const denied = await call({ url: `http://127.0.0.1:${P}/echo/a` });
  assert.match(denied.message, /^egress denied/);
  const allowed = await call({ url: `http://127.0.0.1:${P}/x/count?k=live` });
  assert.equal(allowed.status, 200);

  const cleared = await node.control('DELETE', '/v1/workers/c1/egress');
  assert.equal(cleared.status, 200);
  const none = await call({ url: `http://127.0.0.1:${P}/x/count?k=live` });
  assert.match(none.message, /^egress denied/, 'no rules: everything is denied');

  const bad = await node.control('PUT', '/v1/workers/c1/egress', { body: { rules: [{ match: 'https://a.*.com/' }] } });
  assert.equal(bad.status, 400);
  assert.match(bad.json.error, /egress\[0\]\.match/);
  const badDeploy = await node.control('PUT', '/v1/workers/c2', {
    body: { modules: { 'index.js': CLIENT }, egress: [{ match: 'ftp://x/' }] },
  });
  assert.equal(badDeploy.status, 400);
  assert.match(badDeploy.json.error, /egress\[0\]\.match: the scheme/);
  const unknown = await node.control('GET', '/v1/workers/nobody/egress');
  assert.equal(unknown.status, 404);

  const restore = await node.control('PUT', '/v1/workers/c1/egress', { body: rulesFor() });
  assert.equal(restore.status, 200, restore.text);
});

// ---- credentials ----------------------------------------------------------

test('injected headers replace the worker\'s own; the worker never sees them', async () => {
  const r = await call({
    url: `http://127.0.0.1:${P}/echo/auth`,
    init: { headers: { authorization: 'Bearer from-the-worker', 'x-worker': 'kept' } },
  });
  assert.equal(r.ok, true, JSON.stringify(r));
  const echo = JSON.parse(r.body);
  // The upstream echoing request headers back is the one place a value can
  // appear in the worker's view (docs/egress.md says so).
  assert.equal(echo.headers.authorization, `Bearer ${API_TOKEN}`);
  assert.equal(echo.headers['x-api-key'], API_KEY);
  assert.equal(echo.headers['x-worker'], 'kept');
  // a rule without injection sends the worker's headers as they are
  const plain = await call({ url: `http://localhost:${P}/echo/plain`, init: { headers: { authorization: 'mine' } } });
  assert.equal(JSON.parse(plain.body).headers.authorization, 'mine');
});

test('a rotated secret applies to the next request; a missing one fails the fetch without values', async () => {
  await putSecret('API_TOKEN', ROTATED);
  const r = await call({ url: `http://127.0.0.1:${P}/echo/rot` });
  assert.equal(JSON.parse(r.body).headers.authorization, `Bearer ${ROTATED}`);
  await putSecret('API_TOKEN', API_TOKEN);

  const del = await node.control('DELETE', '/v1/secrets/API_KEY');
  assert.equal(del.status, 200, del.text);
  // deleting a secret deletes its grants: first the grant is missing, then the value
  const ungranted = await call({ url: `http://127.0.0.1:${P}/echo/missing` });
  assert.equal(ungranted.name, 'TypeError');
  assert.match(ungranted.message, /secret "API_KEY" is not granted to worker c1/);
  await grant('API_KEY', 'c1');
  await grant('API_KEY', 'lim');
  const missing = await call({ url: `http://127.0.0.1:${P}/echo/missing` });
  assert.equal(missing.name, 'TypeError');
  assert.match(missing.message, /secret "API_KEY" is not set/);
  for (const v of SECRET_VALUES) assert.ok(!missing.message.includes(v));
  await putSecret('API_KEY', API_KEY);
});

test('secrets API: write-only values, names and times listed, delete', async () => {
  const put = await node.control('PUT', '/v1/secrets/NEW_ONE', { body: { value: 'v1' } });
  assert.equal(put.status, 201, put.text);
  assert.deepEqual(Object.keys(put.json).sort(), ['created', 'name', 'updated_at', 'workers']);
  const again = await node.control('PUT', '/v1/secrets/NEW_ONE', { body: 'v2', headers: { 'content-type': 'text/plain' } });
  assert.equal(again.status, 200);
  assert.equal(again.json.created, false);

  const list = await node.control('GET', '/v1/secrets');
  assert.equal(list.status, 200);
  const names = list.json.secrets.map((s) => s.name);
  assert.deepEqual(names, ['API_KEY', 'API_TOKEN', 'NEW_ONE']);
  for (const s of list.json.secrets) {
    assert.deepEqual(Object.keys(s).sort(), ['name', 'updated_at', 'workers']);
    assert.ok(!Number.isNaN(Date.parse(s.updated_at)));
  }
  const read = await node.control('GET', '/v1/secrets/NEW_ONE');
  assert.equal(read.status, 405);
  assert.match(read.json.error, /write-only/);
  assert.equal((await node.control('DELETE', '/v1/secrets/NEW_ONE')).status, 200);
  assert.equal((await node.control('DELETE', '/v1/secrets/NEW_ONE')).status, 404);
  assert.equal((await node.control('PUT', '/v1/secrets/bad-name', { body: { value: 'x' } })).status, 400);
  const multi = await node.control('PUT', '/v1/secrets/MULTI', { body: { value: 'a\nb' } });
  assert.equal(multi.status, 400);
  // an empty value is refused as edgectl refuses it, and stores nothing
  for (const [body, headers] of [['', { 'content-type': 'text/plain' }], ['\n', { 'content-type': 'text/plain' }],
    ['\r\n', {}], [{ value: '' }, {}]]) {
    const empty = await node.control('PUT', '/v1/secrets/EMPTY', { body, headers });
    assert.equal(empty.status, 400, `${JSON.stringify(body)}: ${empty.text}`);
    assert.equal(empty.json.error, 'the secret value is empty');
  }
  const after = await node.control('GET', '/v1/secrets');
  assert.ok(!after.json.secrets.some((s) => s.name === 'EMPTY'), after.text);
  assert.equal((await node.control('GET', '/v1/secrets', { token: 'wrong' })).status, 401);
});

test('secrets are nowhere but in the egress\'s encrypted store', async () => {
  const dir = path.join(node.dataDir, 'egress');
  const key = statSync(path.join(dir, 'secrets.key'));
  assert.equal(key.mode & 0o777, 0o600, 'the key file is 0600');
  assert.equal(key.size, 32);
  const store = readFileSync(path.join(dir, 'secrets.json'), 'utf8');
  assert.ok(store.includes('API_TOKEN'), 'the store names its secrets');
  const everything = [store];
  // every other file of the data directory, and what an operator can read
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const f = path.join(d, e.name);
      if (e.isDirectory()) walk(f);
      else if (e.isFile() && !e.name.startsWith('secrets.key')) everything.push(readFileSync(f).toString('latin1'));
    }
  };
  walk(node.dataDir);
  for (const p of ['/v1/secrets', '/v1/workers/c1', '/v1/workers/c1/egress', '/v1/node', '/v1/tenants', '/metrics']) {
    everything.push((await node.control('GET', p)).text);
  }
  // a failed fetch's error on a rule that injects: no value in it
  everything.push(JSON.stringify(await call({ url: `http://127.0.0.1:${P}/echo/x`, init: { method: 'PUT' } })));
  for (const text of everything) {
    for (const v of SECRET_VALUES) assert.ok(!text.includes(v), 'a secret value leaked');
  }
});

// ---- SSRF -----------------------------------------------------------------

test('addresses on private networks are refused even when a rule allows them, naming the reason', async () => {
  const cases = [
    [`http://127.0.0.2:${P}/`, 'egress denied: 127.0.0.2 is a loopback address'],
    [`http://[::1]:${P}/`, 'egress denied: ::1 is a loopback address'],
    [`http://[::ffff:127.0.0.2]:${P}/`, 'egress denied: ::ffff:127.0.0.2 is a loopback address'],
    ['http://169.254.169.254/latest/meta-data', 'egress denied: 169.254.169.254 is a link-local address'],
    [`http://0.0.0.0:${P}/`, 'egress denied: 0.0.0.0 is an unspecified address'],
  ];
  for (const [url, message] of cases) {
    const r = await call({ url });
    assert.equal(r.message, message, url);
  }
});

test('a name that resolves to a private address is refused; the allow list is a flag and a config key', async (t) => {
  const cfg = writeFile(tempDir(), 'edgenode.json', JSON.stringify({ egress_allow_cidr: ['192.0.2.0/24'] }));
  const other = await startNode({ workers: 1, configFile: cfg });
  t.after(() => other.stop({ clean: true }));
  const rules = [
    { match: `http://localhost:${P}/echo/*` },
    { match: `http://127.0.0.1:${P}/echo/*` },
    { match: 'http://192.0.2.1:9/', connect_timeout_ms: 300, timeout_ms: 2000 },
  ];
  const d = await other.control('PUT', '/v1/workers/c1', {
    body: { modules: { 'index.js': CLIENT }, egress: rules, limits: LIMITS },
  });
  assert.equal(d.status, 201, d.text);
  const ask = async (spec) => (await other.ingress('c1', '/', { method: 'POST', body: JSON.stringify(spec) })).json;
  const byName = await ask({ url: `http://localhost:${P}/echo/a` });
  assert.equal(byName.message, 'egress denied: localhost resolves to 127.0.0.1, a loopback address');
  const literal = await ask({ url: `http://127.0.0.1:${P}/echo/a` });
  assert.equal(literal.message, 'egress denied: 127.0.0.1 is a loopback address');
  // 192.0.2.0/24 is reserved, but the config file allows it: the fetch is
  // attempted (and fails to connect), not refused.
  const allowed = await ask({ url: 'http://192.0.2.1:9/' });
  assert.equal(allowed.ok, false);
  assert.doesNotMatch(allowed.message, /egress denied/);
  assert.match(allowed.message, /192\.0\.2\.1:9/);

  const bad = await runEdgenode(['--egress-allow-cidr', '10.0.0.1/8', '--data', tempDir()]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--egress-allow-cidr/);
});

// ---- redirects ------------------------------------------------------------

test('redirects: followed and checked again at every hop; manual and error modes', async () => {
  const to = encodeURIComponent('/echo/after');
  const r = await call({ url: `http://127.0.0.1:${P}/x/redirect?to=${to}` });
  assert.equal(r.status, 200, JSON.stringify(r));
  assert.equal(r.redirected, true);
  assert.equal(r.url, `http://127.0.0.1:${P}/echo/after`);
  assert.equal(JSON.parse(r.body).headers.authorization, `Bearer ${API_TOKEN}`, 'the hop\'s own rule injects');

  const away = await call({ url: `http://127.0.0.1:${P}/x/redirect?to=${encodeURIComponent('https://evil.example.org/steal')}` });
  assert.equal(away.name, 'TypeError');
  assert.equal(away.message, `egress denied: evil.example.org is not allowed for this worker (redirected from http://127.0.0.1:${P})`);

  const ssrf = await call({ url: `http://127.0.0.1:${P}/x/redirect?to=${encodeURIComponent('http://169.254.169.254/latest/meta-data')}` });
  assert.equal(ssrf.message, 'egress denied: 169.254.169.254 is a link-local address');

  // Another origin: the worker's own credentials stay behind.
  const cross = await call({
    url: `http://127.0.0.1:${P}/x/redirect?to=${encodeURIComponent(`http://localhost:${P}/echo/cross`)}`,
    init: { headers: { authorization: 'worker-secret', 'x-other': 'kept' } },
  });
  const ce = JSON.parse(cross.body);
  assert.equal(ce.headers.authorization, undefined);
  assert.equal(ce.headers['x-other'], 'kept');

  // 303 turns a POST into a GET without a body
  const see = await call({
    url: `http://127.0.0.1:${P}/x/redirect?status=303&to=${to}`,
    init: { method: 'POST', body: 'data', headers: { 'content-type': 'text/plain' } },
  });
  const seen = JSON.parse(see.body);
  assert.equal(seen.method, 'GET');
  assert.equal(seen.body, '');
  assert.equal(seen.headers['content-type'], undefined);

  const manual = await call({ url: `http://127.0.0.1:${P}/x/redirect?to=${to}`, init: { redirect: 'manual' } });
  assert.equal(manual.status, 302);
  assert.ok(manual.headers.some(([k, v]) => k === 'location' && v === '/echo/after'));
  const error = await call({ url: `http://127.0.0.1:${P}/x/redirect?to=${to}`, init: { redirect: 'error' } });
  assert.equal(error.name, 'TypeError');
  assert.match(error.message, /redirect/);
});

// ---- failing upstreams ----------------------------------------------------

test('an upstream that stalls, resets or speaks garbage fails the fetch with a clear error', async () => {
  const t0 = Date.now();
  const stall = await call({ url: `http://127.0.0.1:${P}/stall` });
  assert.equal(stall.name, 'TypeError');
  assert.equal(stall.message, `127.0.0.1 did not respond within 800 ms`);
  assert.ok(Date.now() - t0 < 5000);

  const midBody = await call({ url: `http://127.0.0.1:${P}/stall-body` });
  assert.equal(midBody.ok, false);
  assert.match(midBody.message, /did not complete within 800 ms/);

  const reset = await call({ url: `http://127.0.0.1:${P}/x/reset` });
  assert.equal(reset.name, 'TypeError');
  assert.match(reset.message, /127\.0\.0\.1:\d+ (closed the connection|.*reset)/);

  const garbage = await call({ url: `http://127.0.0.1:${P}/x/malformed` });
  assert.equal(garbage.name, 'TypeError');
  assert.match(garbage.message, /^malformed response from 127\.0\.0\.1:\d+/);

  const closed = await call({ url: `http://127.0.0.1:1/echo/x` });
  assert.match(closed.message, /^egress denied/);

  // More bad heads than a request has fetch slots (6): each lets go of its
  // slot, so the ordinary fetch after them still runs.
  const sequence = Array.from({ length: 7 }, () => ({ url: `http://127.0.0.1:${P}/x/badname` }));
  sequence.push({ url: `http://127.0.0.1:${P}/echo/after-bad-heads` });
  const seq = await call({ sequence });
  for (const r of seq.results.slice(0, 7)) {
    assert.equal(r.name, 'TypeError', JSON.stringify(r));
    assert.match(r.message, /^fetch failed: http:\/\/127\.0\.0\.1:\d+\/x\/badname answered with a malformed header \(/);
  }
  assert.equal(seq.results[7].status, 200, JSON.stringify(seq.results[7]));
});

test('TLS: verified against the test CA, with the host name checked; SNI and IP addresses', async () => {
  const good = await call({ url: `https://localhost:${TLS.good}/` });
  assert.equal(good.body, `tls good localhost:${TLS.good}`);
  const ip = await call({ url: `https://127.0.0.1:${TLS.good}/` });
  assert.equal(ip.body, `tls good 127.0.0.1:${TLS.good}`);
  const wrong = await call({ url: `https://localhost:${TLS.wrong}/` });
  assert.equal(wrong.name, 'TypeError');
  assert.equal(wrong.message, 'TLS certificate is not valid for localhost');
  const self = await call({ url: `https://localhost:${TLS.self}/` });
  assert.equal(self.name, 'TypeError');
  assert.match(self.message, /^TLS certificate of localhost is not trusted: /);
});

// ---- limits -------------------------------------------------------------------

test('limits: subrequests per request (redirects count), 6 at a time, response size', async () => {
  const lim = await node.control('PUT', '/v1/workers/lim', {
    body: { modules: { 'index.js': CLIENT }, egress: rulesFor(), limits: { ...LIMITS, sub_requests: 3 } },
  });
  assert.equal(lim.status, 201, lim.text);
  const count = { url: `http://127.0.0.1:${P}/x/count?k=lim` };
  const seq = await call({ sequence: [count, count, count, count] }, 'lim');
  assert.deepEqual(seq.results.map((r) => r.ok), [true, true, true, false]);
  assert.equal(seq.results[3].name, 'TypeError');
  assert.equal(seq.results[3].message, 'subrequest limit exceeded: a request may make at most 3 subrequests (limits.sub_requests)');
  assert.equal(state.counts.lim, 3);
  const redirect = { url: `http://127.0.0.1:${P}/x/redirect?to=${encodeURIComponent('/x/count?k=r')}` };
  const withRedirect = await call({ sequence: [redirect, count, count] }, 'lim');
  assert.deepEqual(withRedirect.results.map((r) => r.ok), [true, true, false]);

  state.maxActive = 0;
  const slow = { url: `http://127.0.0.1:${P}/x/slow?ms=250` };
  const t0 = Date.now();
  const many = await call({ parallel: Array(10).fill(slow) });
  assert.equal(many.results.length, 10, JSON.stringify(many.results));
  assert.ok(many.results.every((r) => r.ok && r.body === 'slow done'), JSON.stringify(many.results));
  assert.equal(state.maxActive, 6, 'at most 6 at once, and 6 are used');
  assert.ok(Date.now() - t0 >= 450, 'the last 4 waited for a slot');

  const small = await call({ url: `http://127.0.0.1:${P}/big?n=1000` });
  assert.equal(small.body.length, 1000);
  const big = await call({ url: `http://127.0.0.1:${P}/big?n=5000` });
  assert.equal(big.name, 'TypeError');
  assert.match(big.message, /larger than the limit of 4096 bytes/);
});

// ---- streaming and abort ----------------------------------------------------

test('the body streams: the worker reads the first chunk before the upstream sends the rest', async () => {
  const r = await call({
    url: `http://127.0.0.1:${P}/x/stream`, read: 'chunks',
    release: `http://127.0.0.1:${P}/x/release`,
  });
  assert.equal(r.ok, true, JSON.stringify(r));
  assert.equal(r.chunks[0], 'first;');
  assert.equal(r.body, 'first;second');
});

test('a large body arrives whole; keep-alive connections are reused; Request objects work', async () => {
  const r = await call({ url: `http://127.0.0.1:${P}/x/large` });
  assert.equal(r.ok, true, JSON.stringify(r).slice(0, 300));
  assert.equal(r.body.length, 48 * 65536);
  assert.equal(r.body.slice(0, 8), 'abcdefgh');
  const c = await call({ url: `http://127.0.0.1:${P}/x/large`, read: 'chunks' });
  assert.equal(c.body.length, 48 * 65536);
  assert.ok(c.chunks.length > 1, 'read in several pieces');

  // the fetched Response returned as the worker's own, body streamed through
  const proxied = await node.ingress('c1', `/proxy?url=${encodeURIComponent(`http://127.0.0.1:${P}/x/large`)}`);
  assert.equal(proxied.status, 200);
  assert.equal(proxied.body.length, 48 * 65536);
  const echoed = await node.ingress('c1', `/proxy?url=${encodeURIComponent(`http://127.0.0.1:${P}/echo/p`)}`);
  assert.equal(echoed.headers['x-echo'], 'yes');
  assert.equal(echoed.json.headers['x-via'], 'proxy');

  const port = { url: `http://127.0.0.1:${P}/x/port` };
  const seq = await call({ sequence: [port, port, port, port, port] });
  const ports = new Set(seq.results.map((x) => x.body));
  assert.equal(ports.size, 1, `one pooled connection for five fetches: ${[...ports]}`);

  const req = await call({
    url: `http://127.0.0.1:${P}/echo/req`, request: true,
    init: { method: 'POST', body: 'from a Request', headers: { 'x-r': '1' } },
  });
  const e = JSON.parse(req.body);
  assert.deepEqual([e.method, e.body, e.headers['x-r']], ['POST', 'from a Request', '1']);
});

test('AbortSignal: aborting rejects with AbortError and drops the upstream connection', async () => {
  const n = state.closed.length;
  const r = await call({ url: `http://127.0.0.1:${P}/x/hang?a=1`, abortAfter: 150 });
  assert.equal(r.ok, false);
  assert.equal(r.name, 'AbortError');
  await waitFor(() => state.closed.slice(n).includes('/x/hang?a=1'), { what: 'the upstream connection to close' });
});

// ---- the egress process going away --------------------------------------------

test('SIGKILL of the egress mid-request: the fetch rejects clearly, the egress is restarted, the next fetch works', async () => {
  const ready = node.logsMatching((l) => l.json?.msg === 'egress ready' && l.json.process === 'egress');
  const pid = ready.at(-1).json.pid;
  const from = node.logs.length;
  const hangs = state.hangs.length;
  const pending = call({ url: `http://127.0.0.1:${P}/x/hang?k=kill` });
  await waitFor(() => state.hangs.length > hangs, { what: 'the upstream to get the request' });
  process.kill(pid, 'SIGKILL');
  const r = await pending;
  assert.equal(r.ok, false);
  assert.equal(r.name, 'TypeError');
  assert.match(r.message, /egress process went away/);
  const exited = await node.waitForLog((l) => l.json?.msg === 'egress exited: restarting', { from, what: 'the restart line' });
  assert.equal(exited.json.signal, 9);
  await node.waitForLog((l) => l.json?.msg === 'egress ready' && l.json.pid !== pid, { from, timeout: 10000, what: 'a new egress' });
  const after = await call({ url: `http://127.0.0.1:${P}/echo/after-restart` });
  assert.equal(after.ok, true, JSON.stringify(after));
  assert.equal(JSON.parse(after.body).headers.authorization, `Bearer ${API_TOKEN}`, 'secrets and rules survive');
});

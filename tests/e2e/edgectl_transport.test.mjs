// edgectl's way to the control API: through an HTTP proxy from the environment,
// across redirects (the token only for --node's origin), and behind TLS with
// a certificate generated here, trusted through --cacert or refused without it.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { EDGECTL, missingInput, startNode, tempDir, writeFile } from './lib/node.mjs';

let node;
let work;
const servers = [];

// Proxy variables of the machine running the tests must not steer edgectl.
const PROXY_VARS = ['http_proxy', 'HTTP_PROXY', 'https_proxy', 'HTTPS_PROXY', 'all_proxy', 'ALL_PROXY',
  'no_proxy', 'NO_PROXY'];

before(async () => {
  node = await startNode({ workers: 1 });
  work = tempDir('edgectl-transport-');
  writeFile(work, 'hello.js', `export default { fetch() { return new Response('hello through the wire'); } };\n`);
  await node.deployOk('hello', `export default { fetch() { return new Response('hi'); } };\n`);
});

after(async () => {
  for (const s of servers) s.close();
  if (node) await node.stop({ clean: true });
});

function ctl(args, { nodeUrl, env = {}, extra = [] } = {}) {
  const base = ['--node', nodeUrl ?? `http://127.0.0.1:${node.controlPort}`, '--token-file', node.tokenFile, ...extra];
  const childEnv = { ...process.env };
  for (const v of PROXY_VARS) delete childEnv[v];
  Object.assign(childEnv, env);
  return new Promise((resolve, reject) => {
    const proc = spawn(EDGECTL, [...base, ...args], { cwd: work, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d) => { stdout += d; });
    proc.stderr.on('data', (d) => { stderr += d; });
    proc.on('error', reject);
    const timer = setTimeout(() => proc.kill('SIGKILL'), 15000);
    proc.on('close', (code) => { clearTimeout(timer); resolve({ code, stdout, stderr }); });
  });
}

function ok(r, what) {
  assert.equal(r.code, 0, `${what}: exit ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  return r;
}

function listen(server) {
  servers.push(server);
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server.address().port)));
}

// Sends a request on to the control API as it came (Authorization included) and the answer back.
function forward(req, res, upstreamPath) {
  const headers = { ...req.headers };
  delete headers['proxy-connection'];
  delete headers['proxy-authorization'];
  const up = http.request({ host: '127.0.0.1', port: node.controlPort, method: req.method, path: upstreamPath, headers },
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    });
  up.on('error', (err) => { res.writeHead(502); res.end(String(err)); });
  req.pipe(up);
}

// A forward proxy: absolute-form requests for http://, CONNECT tunnels for https://.
async function startProxy() {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, authorization: req.headers.authorization });
    const target = new URL(req.url);
    if (target.port !== String(node.controlPort)) {
      res.writeHead(502);
      res.end('this test proxy only reaches the control API');
      return;
    }
    forward(req, res, target.pathname + target.search);
  });
  server.on('connect', (req, socket, head) => {
    seen.push({ method: 'CONNECT', url: req.url });
    const [host, port] = req.url.split(':');
    const up = net.connect(Number(port), host, () => {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
    up.on('error', () => socket.destroy());
    socket.on('error', () => up.destroy());
  });
  const port = await listen(server);
  return { port, seen, url: `http://127.0.0.1:${port}` };
}

test('through an HTTP proxy named by http_proxy / HTTP_PROXY', async () => {
  const proxy = await startProxy();
  const controlUrl = `http://127.0.0.1:${node.controlPort}`;
  const r = ok(await ctl(['list'], { env: { http_proxy: proxy.url, HTTP_PROXY: proxy.url } }), 'list through the proxy');
  assert.match(r.stdout, /^hello\s+1\s/m);
  assert.deepEqual(proxy.seen.map((s) => `${s.method} ${s.url}`), [`GET ${controlUrl}/v1/workers`]);
  assert.match(proxy.seen[0].authorization ?? '', /^Bearer [0-9a-f]+$/, 'the token went through the proxy');

  // a deploy (PUT with a body) goes the same way
  ok(await ctl(['deploy', 'viaproxy', 'hello.js'], { env: { http_proxy: proxy.url } }), 'deploy through the proxy');
  assert.ok(proxy.seen.some((s) => s.method === 'PUT' && s.url === `${controlUrl}/v1/workers/viaproxy`),
    JSON.stringify(proxy.seen));
  assert.equal((await node.ingress('viaproxy', '/')).text, 'hello through the wire');

  // no_proxy sends it past the proxy
  const before = proxy.seen.length;
  ok(await ctl(['list'], { env: { http_proxy: proxy.url, no_proxy: '127.0.0.1' } }), 'list with no_proxy');
  assert.equal(proxy.seen.length, before, 'the proxy saw nothing');

  // a proxy that is not there: the error says which variable named it
  const dead = await ctl(['list'], { env: { http_proxy: 'http://127.0.0.1:1' } });
  assert.equal(dead.code, 1, dead.stderr);
  assert.match(dead.stderr, /proxy of \$http_proxy/);
  ok(await ctl(['delete', 'viaproxy']), 'delete');
});

test('follows a same-origin redirect with the token, method and body', async () => {
  // /old/... answers 307 to /..., on the same host and port; the rest goes to the control API
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push({ method: req.method, url: req.url, authorization: req.headers.authorization });
    if (req.url.startsWith('/old/')) {
      res.writeHead(307, { Location: req.url.slice('/old'.length) });
      res.end();
      return;
    }
    forward(req, res, req.url);
  });
  const port = await listen(server);
  const nodeUrl = `http://127.0.0.1:${port}/old`;
  const r = ok(await ctl(['list'], { nodeUrl }), 'list across a redirect');
  assert.match(r.stdout, /^hello\s/m);
  assert.deepEqual(seen.map((s) => `${s.method} ${s.url}`), ['GET /old/v1/workers', 'GET /v1/workers']);
  assert.ok(seen.every((s) => /^Bearer /.test(s.authorization ?? '')), 'the token on both hops: same origin');

  // a 307 keeps PUT and its body
  seen.length = 0;
  const d = ok(await ctl(['deploy', 'moved', 'hello.js'], { nodeUrl }), 'deploy across a redirect');
  assert.match(d.stdout, /deployed moved/);
  assert.deepEqual(seen.filter((s) => s.method === 'PUT').map((s) => s.url), ['/old/v1/workers/moved', '/v1/workers/moved']);
  assert.equal((await node.ingress('moved', '/')).text, 'hello through the wire');
  ok(await ctl(['delete', 'moved']), 'delete');
});

test('a redirect to another origin is followed without the token', async () => {
  const seen = [];
  const server = http.createServer((req, res) => {
    seen.push(req.url);
    res.writeHead(307, { Location: `http://127.0.0.1:${node.controlPort}${req.url}` });
    res.end();
  });
  const port = await listen(server);
  const r = await ctl(['list'], { nodeUrl: `http://127.0.0.1:${port}` });
  assert.equal(r.code, 1, r.stderr);
  // the control API itself answered, and refused: the token stayed behind
  const refused = await node.control('GET', '/v1/workers', { token: 'none' });
  assert.equal(refused.status, 401);
  assert.ok(r.stderr.includes(`${refused.json.error} (HTTP 401)`), r.stderr);
  assert.match(r.stderr, /another origin/);
  assert.deepEqual(seen, ['/v1/workers']);

  // a redirect loop ends
  const loop = http.createServer((req, res) => { res.writeHead(302, { Location: req.url }); res.end(); });
  const loopPort = await listen(loop);
  const l = await ctl(['list'], { nodeUrl: `http://127.0.0.1:${loopPort}` });
  assert.equal(l.code, 1);
  assert.match(l.stderr, /more than 10 redirects/);
});

test('behind TLS: trusted with --cacert, refused without it', async (t) => {
  if (spawnSync('openssl', ['version']).status !== 0) {
    return missingInput(t, 'the openssl command is missing', 'deploy/setup.sh installs it');
  }
  const dir = tempDir('edgectl-tls-');
  const key = path.join(dir, 'key.pem');
  const cert = path.join(dir, 'cert.pem');
  const gen = spawnSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert,
    '-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost'], { encoding: 'utf8' });
  assert.equal(gen.status, 0, gen.stderr);
  const server = https.createServer({ key: readFileSync(key), cert: readFileSync(cert) }, (req, res) => forward(req, res, req.url));
  const port = await listen(server);
  const nodeUrl = `https://127.0.0.1:${port}`;

  const r = ok(await ctl(['list'], { nodeUrl, extra: ['--cacert', cert] }), 'list over TLS');
  assert.match(r.stdout, /^hello\s/m);
  ok(await ctl(['deploy', 'tls', 'hello.js'], { nodeUrl, extra: ['--cacert', cert] }), 'deploy over TLS');
  assert.equal((await node.ingress('tls', '/')).text, 'hello through the wire');
  ok(await ctl(['list'], { nodeUrl, env: { EDGENODE_CACERT: cert } }), 'the CA from EDGENODE_CACERT');

  const refused = await ctl(['list'], { nodeUrl });
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, new RegExp(`cannot verify the TLS certificate of 127\\.0\\.0\\.1:${port}`));
  assert.match(refused.stderr, /--cacert FILE/);

  ok(await ctl(['list'], { nodeUrl, extra: ['--insecure'] }), '--insecure skips the check');

  const missing = await ctl(['list'], { nodeUrl, extra: ['--cacert', path.join(dir, 'none.pem')] });
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /none\.pem/);

  // https through the proxy: a CONNECT tunnel, TLS end to end
  const proxy = await startProxy();
  ok(await ctl(['list'], { nodeUrl, extra: ['--cacert', cert], env: { https_proxy: proxy.url } }), 'TLS through the proxy');
  assert.deepEqual(proxy.seen.map((s) => `${s.method} ${s.url}`), [`CONNECT 127.0.0.1:${port}`]);
  ok(await ctl(['delete', 'tls'], { nodeUrl, extra: ['--cacert', cert] }), 'delete');
});

test('--timeout: a node that stays silent is given up on', async () => {
  const held = [];
  const server = net.createServer((socket) => { held.push(socket); socket.on('error', () => {}); });
  const port = await listen(server);
  const started = Date.now();
  const r = await ctl(['list'], { nodeUrl: `http://127.0.0.1:${port}`, extra: ['--timeout', '1'] });
  const took = Date.now() - started;
  for (const s of held) s.destroy();
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, new RegExp(`no answer from 127\\.0\\.0\\.1:${port}: timed out`));
  assert.ok(took < 8000, `gave up after ${took} ms`);
  const bad = await ctl(['list'], { extra: ['--timeout', '0'] });
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--timeout needs a positive integer/);
});

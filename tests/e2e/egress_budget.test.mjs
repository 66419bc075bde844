// The per-request subrequest budget shared by fetches in flight at once
// (redirect hops included), and fetch() bodies larger than one proto frame.
// Against a real node and a local upstream; worker/egress_link.c, egress/fetch.c.
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { startNode } from './lib/node.mjs';

const LIMIT_MESSAGE = (n) =>
  `subrequest limit exceeded: a request may make at most ${n} subrequests (limits.sub_requests)`;

// Fetches what the request body asks for, all at once, and reports each outcome.
// {urls: [...], big: bytes}: with big, a POST with a body of that size goes first.
const WORKER = `
function describe(err) {
  return { ok: false, name: err?.name, message: err?.message };
}
async function one(url, init) {
  const res = await fetch(url, init);
  return { ok: true, status: res.status, redirected: res.redirected, body: await res.text() };
}
export default {
  async fetch(request) {
    const spec = await request.json();
    const calls = [];
    if (spec.big) calls.push(one(spec.bigUrl, { method: 'POST', body: new Uint8Array(spec.big) }).catch(describe));
    for (const url of spec.urls ?? []) calls.push(one(url).catch(describe));
    return Response.json(await Promise.all(calls));
  },
};
`;

const counts = {};
let upstream;
let P;
let node;

function route(req, res) {
  const url = new URL(req.url, 'http://x');
  const k = url.searchParams.get('k') ?? '';
  counts[k] = (counts[k] ?? 0) + 1;
  if (url.pathname === '/chain') {
    // /chain?n=K redirects K times, then answers
    const n = Number(url.searchParams.get('n'));
    if (n > 0) {
      res.writeHead(302, { location: `/chain?n=${n - 1}&k=${encodeURIComponent(k)}` });
      res.end();
      return;
    }
    res.end('end of chain');
    return;
  }
  if (url.pathname === '/sink') {
    let bytes = 0;
    req.on('data', (c) => { bytes += c.length; });
    req.on('end', () => res.end(String(bytes)));
    return;
  }
  res.end('ok');
}

async function deploy(name, limits) {
  const r = await node.control('PUT', `/v1/workers/${name}`, {
    body: {
      modules: { 'index.js': WORKER },
      egress: [{ match: `http://127.0.0.1:${P}/`, methods: ['GET', 'POST'] }],
      limits: { cpu_ms: 5000, ...limits },
    },
  });
  assert.equal(r.status, 201, r.text);
}

async function run(name, spec) {
  const r = await node.ingress(name, '/', {
    method: 'POST', body: JSON.stringify(spec), headers: { 'content-type': 'application/json' },
    timeout: 60000,
  });
  assert.equal(r.status, 200, `worker answered ${r.status}: ${r.text}`);
  return r.json;
}

const chain = (n, k) => `http://127.0.0.1:${P}/chain?n=${n}&k=${k}`;

before(async () => {
  upstream = http.createServer(route);
  P = await new Promise((resolve) => upstream.listen(0, '127.0.0.1', () => resolve(upstream.address().port)));
  node = await startNode({ workers: 1, extraArgs: ['--egress-allow-cidr', '127.0.0.1/32'] });
  // Moving 80 MiB through the isolate's host calls twice, under the sanitizers
  // on a busy machine, has taken more than 5 s of CPU.
  await deploy('big', { memory_mb: 1024, cpu_ms: 30000 });
  await deploy('five', { sub_requests: 5 });
  await deploy('ten', { sub_requests: 10 });
});

after(async () => {
  if (node) await node.stop({ clean: true });
  if (upstream) upstream.close();
});

// First in the file: the worker process has no egress connection yet, so the
// fetches wait for it to be made. The big one used to stay unsent, and every
// fetch queued after it with it, until the wall-time limit.
test('a request body over the frame limit fails with the limit named; other fetches go on', async () => {
  const big = 80 * 1024 * 1024 + 1;
  const urls = [1, 2, 3].map((i) => `http://127.0.0.1:${P}/plain?k=after-big-${i}`);
  const results = await run('big', { big, bigUrl: `http://127.0.0.1:${P}/sink?k=big`, urls });
  assert.equal(results[0].ok, false, JSON.stringify(results[0]));
  assert.equal(results[0].name, 'TypeError');
  assert.match(results[0].message,
    /^fetch failed: the request body is larger than 80 MiB, the most a fetch can send \(\d+ bytes, URL and headers included\)$/);
  assert.equal(counts.big, undefined, 'nothing of it reached the upstream');
  assert.deepEqual(results.slice(1).map((r) => r.ok && r.body), ['ok', 'ok', 'ok']);

  // Just under the limit still goes, whole.
  const fits = 79 * 1024 * 1024;
  const [sent] = await run('big', { big: fits, bigUrl: `http://127.0.0.1:${P}/sink?k=fits` });
  assert.equal(sent.ok, true, JSON.stringify(sent));
  assert.equal(sent.body, String(fits));
});

test('parallel fetches following redirects share the budget: limit 5, three chains of 4', async () => {
  const results = await run('five', { urls: [1, 2, 3].map(() => chain(4, 'five')) });
  assert.equal(counts.five, 5, 'the upstream got exactly sub_requests requests');
  assert.equal(results.length, 3, JSON.stringify(results));
  assert.ok(results.every((r) => !r.ok), JSON.stringify(results));
  for (const r of results) {
    assert.equal(r.name, 'TypeError');
    assert.equal(r.message, LIMIT_MESSAGE(5));
  }
});

test('ten fetches at once (six run, four queue), nine redirects each, limit 10', async () => {
  const results = await run('ten', { urls: Array.from({ length: 10 }, () => chain(9, 'ten')) });
  assert.equal(counts.ten, 10, 'the upstream got exactly sub_requests requests');
  assert.equal(results.length, 10, JSON.stringify(results));
  assert.ok(results.every((r) => !r.ok && r.message === LIMIT_MESSAGE(10)), JSON.stringify(results));
});

test('redirects within the budget still work in parallel; the next fetch over it fails', async () => {
  // 3 chains of 2 redirects: 9 requests of 10
  const results = await run('ten', {
    urls: [chain(2, 'fit'), chain(2, 'fit'), chain(2, 'fit')],
  });
  assert.deepEqual(results.map((r) => r.ok && r.redirected && r.body),
    ['end of chain', 'end of chain', 'end of chain']);
  assert.equal(counts.fit, 9);

  // one plain fetch left, then the limit
  const seq = await run('ten', { urls: [chain(0, 'edge')] });
  assert.equal(seq[0].ok, true);
  const [first, second] = await run('ten', { urls: [chain(1, 'over'), chain(0, 'over2')] });
  // a fresh request has a fresh budget
  assert.equal(first.ok, true, JSON.stringify(first));
  assert.equal(second.ok, true, JSON.stringify(second));
});

test('a request with 1 left: a fetch that redirects fails at the redirect, after one request', async () => {
  // 9 plain fetches, then one whose redirect would be the 11th request
  const urls = Array.from({ length: 9 }, (_, i) => `http://127.0.0.1:${P}/plain?k=nine-${i}`);
  urls.push(chain(1, 'last'));
  const results = await run('ten', { urls });
  assert.ok(results.slice(0, 9).every((r) => r.ok), JSON.stringify(results));
  assert.equal(results[9].ok, false);
  assert.equal(results[9].message, LIMIT_MESSAGE(10));
  assert.equal(counts.last, 1, 'the redirect was not followed');
});

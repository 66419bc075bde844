// A worker that fetches itself: directly (the node's own address, refused
// by the egress whatever the rules say) or through another name (a proxy
// in front of the node, which the egress cannot tell from any upstream:
// CDN-Loop, RFC 8586, counts the passes, and the ingress ends the loop).
import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, test } from 'node:test';

import { startNode } from './lib/node.mjs';

const LIMITS = { cpu_ms: 2000 };
let node;
let proxy;
let proxyPort;
let upstream;
let upstreamPort;
const seen = { proxied: 0, loops: [] };

const SELF = `export default {
  async fetch(request, env) {
    const to = new URL(request.url).searchParams.get('to');
    try {
      const r = await fetch(to);
      return new Response(r.status + ' ' + (await r.text()), { status: 200 });
    } catch (e) {
      return new Response('error ' + e.message, { status: 200 });
    }
  },
};`;

before(async () => {
  // The upstream says what CDN-Loop it got.
  upstream = http.createServer((req, res) => {
    seen.loops.push(req.headers['cdn-loop'] ?? null);
    res.end(String(req.headers['cdn-loop'] ?? 'none'));
  });
  await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamPort = upstream.address().port;
  node = await startNode({ workers: 1, extraArgs: ['--egress-allow-cidr', '127.0.0.1/32'] });
  // The proxy forwards everything to the node's ingress as loop.localhost,
  // headers as they came: the worker fetching the proxy fetches itself.
  proxy = http.createServer((req, res) => {
    seen.proxied++;
    const headers = { ...req.headers, host: 'loop.localhost' };
    const fwd = http.request({ port: node.listenPort, host: '127.0.0.1', path: req.url, method: req.method, headers },
      (r) => { res.writeHead(r.statusCode, r.headers); r.pipe(res); });
    fwd.on('error', () => { res.writeHead(502); res.end('proxy: node unreachable'); });
    req.pipe(fwd);
  });
  await new Promise((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  proxyPort = proxy.address().port;
  const rules = [
    { match: `http://127.0.0.1:${node.listenPort}/*` },
    { match: `http://127.0.0.1:${node.controlPort}/*` },
    { match: `http://127.0.0.1:${proxyPort}/*` },
    { match: `http://127.0.0.1:${upstreamPort}/*` },
  ];
  // loop: fetches the proxy, which brings the request back to loop.
  const LOOP = `export default { async fetch() {
    const r = await fetch('http://127.0.0.1:${proxyPort}/');
    return new Response(r.status + ' ' + (await r.text()));
  } };`;
  for (const [name, src] of [['loop', LOOP], ['caller', SELF]]) {
    const r = await node.control('PUT', `/v1/workers/${name}`, {
      body: { main_module: 'index.js', modules: { 'index.js': src }, limits: LIMITS, egress: rules },
    });
    assert.equal(r.status, 201, r.text);
  }
});

after(async () => {
  await node?.stop();
  proxy?.close();
  upstream?.close();
});

test("the node's own addresses are refused by the egress whatever the rules say", async () => {
  for (const port of [node.listenPort, node.controlPort]) {
    const r = await node.ingress('caller', `/?to=${encodeURIComponent(`http://127.0.0.1:${port}/`)}`);
    assert.equal(r.status, 200);
    assert.equal(r.text, `error egress denied: 127.0.0.1:${port} is this node's own address ` +
      '(a worker fetching its own node would loop)');
  }
});

test('every request the egress sends carries CDN-Loop, one pass more than the request that made it', async () => {
  const to = encodeURIComponent(`http://127.0.0.1:${upstreamPort}/`);
  let r = await node.ingress('caller', `/?to=${to}`);
  assert.equal(r.text, '200 edgenode; hops=1');
  r = await node.ingress('caller', `/?to=${to}`, { headers: { 'cdn-loop': 'other-cdn, edgenode; hops=3' } });
  assert.equal(r.text, '200 edgenode; hops=4');
  // a lower count of its own cannot reset it
  r = await node.ingress('caller', `/?to=${to}`, { headers: { 'cdn-loop': 'edgenode; hops=5, edgenode; hops=0' } });
  assert.equal(r.text, '200 edgenode; hops=6');
});

test('an ingress request that came through edgenode 8 times is refused with 508', async () => {
  const r = await node.ingress('caller', '/', { headers: { 'cdn-loop': 'edgenode; hops=8' } });
  assert.equal(r.status, 508);
  assert.deepEqual(r.json, {
    error: 'loop detected: the request came through edgenode\'s egress too many times (CDN-Loop)',
    hops: 8, max_hops: 8,
  });
  const ok = await node.ingress('caller', `/?to=${encodeURIComponent(`http://127.0.0.1:${upstreamPort}/`)}`,
    { headers: { 'cdn-loop': 'edgenode; hops=7' } });
  assert.equal(ok.status, 200);
});

test('a worker fetching itself through another name ends after 8 passes, not 1,555 requests', async () => {
  seen.proxied = 0;
  const r = await node.ingress('loop', '/', { timeout: 30000 });
  assert.equal(r.status, 200);
  assert.match(r.text, /^(200 )+508 \{"error":"loop detected/);
  assert.equal(seen.proxied, 8, 'eight passes through the proxy, then the ingress refused');
});

// PUT /v1/routes: host patterns and paths to workers, the most specific
// winning, before the first-label rule; the X-Edgenode-Worker header for
// clients that cannot set Host.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startNode } from './lib/node.mjs';

const say = (text) => `export default { fetch(req) {
  return new Response(${JSON.stringify(text)} + ' ' + new URL(req.url).pathname);
} };\n`;

const ROUTES = [
  { pattern: 'api.example.com', worker: 'api' },
  { pattern: 'api.example.com/w/*', worker: 'wpath' },
  { pattern: '*.example.com', worker: 'wild' },
  { pattern: '*/tools/*', worker: 'tools' },
];

test('routes send requests to the most specific match, else the first label decides', async (t) => {
  const node = await startNode({ workers: 2 });
  t.after(() => node.stop({ clean: true }));
  for (const name of ['api', 'wpath', 'wild', 'tools', 'plain']) await node.deployOk(name, say(name));

  const empty = await node.control('GET', '/v1/routes');
  assert.equal(empty.status, 200, empty.text);
  assert.deepEqual(empty.json, { routes: [], updated_at: null });

  const put = await node.control('PUT', '/v1/routes', { body: { routes: ROUTES } });
  assert.equal(put.status, 200, put.text);
  assert.deepEqual(put.json.routes, ROUTES);
  assert.ok(!Number.isNaN(Date.parse(put.json.updated_at)), put.text);
  assert.deepEqual((await node.control('GET', '/v1/routes')).json.routes, ROUTES);

  const get = async (host, p = '/', headers = {}) => (await node.ingress(null, p, { host, headers })).text;
  // both worker processes have them: a few requests each
  for (let i = 0; i < 4; i++) {
    assert.equal(await get('api.example.com'), 'api /');
    assert.equal(await get('api.example.com:8080', '/w/x'), 'wpath /w/x');
    assert.equal(await get('www.example.com', '/w/x'), 'wild /w/x');
    assert.equal(await get('127.0.0.1', '/tools/run'), 'tools /tools/run');
    assert.equal(await get('plain.localhost'), 'plain /', 'the first-label rule stays the default');
  }
  // a client that cannot set Host: the header, or a path route
  assert.equal(await get('127.0.0.1', '/', { 'x-edgenode-worker': 'plain' }), 'plain /');
  assert.equal(await get('api.example.com', '/', { 'x-edgenode-worker': 'plain' }), 'plain /');
  const viaFetch = await fetch(`http://127.0.0.1:${node.listenPort}/tools/x`);
  assert.equal(await viaFetch.text(), 'tools /tools/x');
  const headerFetch = await fetch(`http://127.0.0.1:${node.listenPort}/`, { headers: { 'x-edgenode-worker': 'api' } });
  assert.equal(await headerFetch.text(), 'api /');
  // nothing names a worker: 400 saying how one could
  const none = await node.ingress(null, '/', { host: '127.0.0.1' });
  assert.equal(none.status, 400, none.text);
  assert.match(none.json.error, /X-Edgenode-Worker/);
  const bad = await node.ingress(null, '/', { host: '127.0.0.1', headers: { 'x-edgenode-worker': 'Bad_Name' } });
  assert.equal(bad.status, 400, bad.text);
  assert.match(bad.json.error, /X-Edgenode-Worker: not a worker name/);
  // a route to a worker that is not deployed answers as an unknown worker does
  await node.control('PUT', '/v1/routes', { body: { routes: [...ROUTES, { pattern: 'ghost.test', worker: 'ghost' }] } });
  assert.equal((await node.ingress(null, '/', { host: 'ghost.test' })).status, 404);

  // an empty list: back to the first label alone
  assert.equal((await node.control('PUT', '/v1/routes', { body: { routes: [] } })).status, 200);
  assert.equal((await node.ingress(null, '/', { host: 'api.example.com' })).text, 'api /');
  assert.equal((await node.ingress(null, '/', { host: 'www.example.com' })).status, 404);
  const ev = (await node.control('GET', '/v1/events?kind=routes')).json.events;
  assert.deepEqual(ev.map((e) => e.details.routes), [0, 5, 4]);
});

test('routes are kept in node.db: a restarted node and its new processes route by them', async (t) => {
  const first = await startNode({ workers: 1 });
  await first.deployOk('api', say('api'));
  assert.equal((await first.control('PUT', '/v1/routes', { body: { routes: ROUTES } })).status, 200);
  await first.stop({ clean: true });
  const node = await startNode({ workers: 1, dataDir: first.dataDir });
  t.after(() => node.stop({ clean: true }));
  assert.deepEqual((await node.control('GET', '/v1/routes')).json.routes, ROUTES);
  assert.equal((await node.ingress(null, '/', { host: 'api.example.com' })).text, 'api /');
});

test('bad routes get clear errors and change nothing', async (t) => {
  const node = await startNode({ workers: 1 });
  t.after(() => node.stop({ clean: true }));
  await node.control('PUT', '/v1/routes', { body: { routes: ROUTES } });
  const cases = [
    ['not json', /JSON object/],
    [[], /JSON object/],
    [{}, /routes must be an array/],
    [{ routes: ROUTES, more: 1 }, /unknown key "more"/],
    [{ routes: [{ pattern: 'a.test' }] }, /routes\[0\]\.worker: must be a worker name/],
    [{ routes: [{ pattern: 'a.test/x*y', worker: 'a' }] }, /routes\[0\]\.pattern: "a\.test\/x\*y": a '\*' in the path/],
    [{ routes: [{ pattern: 'a.test', worker: 'a' }, { pattern: 'a.test', worker: 'b' }] }, /same pattern as routes\[0\]/],
  ];
  for (const [body, msg] of cases) {
    const r = await node.control('PUT', '/v1/routes', { body, headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.match(r.json.error, msg);
  }
  assert.deepEqual((await node.control('GET', '/v1/routes')).json.routes, ROUTES);
  assert.equal((await node.control('POST', '/v1/routes')).status, 405);
});

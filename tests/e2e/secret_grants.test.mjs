// Secrets are granted to workers (issue 24, item 7). A worker named `thief`
// used to inject another tenant's token into requests to an upstream it
// controlled and read it back. Now: its deploy is refused with 400, a rules
// change naming the secret too, and a grant revoked after the rules were
// stored stops the injection at the egress.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { dedicatedReady, startNode } from './lib/node.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CLIENT = readFileSync(path.join(here, 'fixtures/egress/client.js'), 'utf8');
const SHOP_TOKEN = `shop-${randomBytes(8).toString('hex')}`;
const ROTATED = `rot-${randomBytes(8).toString('hex')}`;

let node;
let upstream;
let P;
const seen = []; // {path, authorization} of every request the upstream got

function rules(secret = 'SHOP_TOKEN', prefix = '/shop/') {
  return [{
    match: `http://127.0.0.1:${P}${prefix}*`,
    inject: { headers: { Authorization: `Bearer \${secret:${secret}}` } },
  }];
}

function deploy(name, egress) {
  const body = { modules: { 'index.js': CLIENT }, limits: { cpu_ms: 2000 } };
  if (egress) body.egress = egress;
  return node.control('PUT', `/v1/workers/${name}`, { body });
}

async function fetchVia(worker, urlPath) {
  const r = await node.ingress(worker, '/', {
    method: 'POST', body: JSON.stringify({ url: `http://127.0.0.1:${P}${urlPath}` }),
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

before(async () => {
  upstream = http.createServer((req, res) => {
    seen.push({ path: req.url, authorization: req.headers.authorization });
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ authorization: req.headers.authorization ?? null }));
  });
  await new Promise((r) => upstream.listen(0, '127.0.0.1', r));
  P = upstream.address().port;
  node = await startNode({ workers: 1, extraArgs: ['--egress-allow-cidr', '127.0.0.1/32'] });
  const put = await node.control('PUT', '/v1/secrets/SHOP_TOKEN', { body: { value: SHOP_TOKEN, workers: ['shop'] } });
  assert.equal(put.status, 201, put.text);
  assert.deepEqual(put.json.workers, ['shop']);
  const shop = await deploy('shop', rules());
  assert.equal(shop.status, 201, shop.text);
});

after(async () => {
  if (node) {
    for (const l of node.logs) {
      for (const v of [SHOP_TOKEN, ROTATED]) assert.ok(!l.raw.includes(v), `a log line holds a secret: ${l.raw}`);
    }
    await node.stop({ clean: true });
  }
  upstream?.close();
});

test('the worker a secret is granted to gets it injected', async () => {
  const r = await fetchVia('shop', '/shop/orders');
  assert.equal(r.status, 200, JSON.stringify(r));
  assert.equal(JSON.parse(r.body).authorization, `Bearer ${SHOP_TOKEN}`);
});

test('thief: a deploy naming a secret not granted to it is refused with 400, and nothing is stored', async () => {
  const before = seen.length;
  const r = await deploy('thief', rules('SHOP_TOKEN', '/thief/'));
  assert.equal(r.status, 400, r.text);
  assert.deepEqual(r.json, { error: 'secret SHOP_TOKEN is not granted to worker thief' });
  assert.equal((await node.control('GET', '/v1/workers/thief')).status, 404);
  // deployed without rules, it cannot add them through the rules route either
  assert.equal((await deploy('thief')).status, 201);
  const set = await node.control('PUT', '/v1/workers/thief/egress', { body: rules('SHOP_TOKEN', '/thief/') });
  assert.equal(set.status, 400, set.text);
  assert.equal(set.json.error, 'secret SHOP_TOKEN is not granted to worker thief');
  assert.deepEqual((await node.control('GET', '/v1/workers/thief/egress')).json.rules, []);
  // every fetch of the thief is denied: it has no rules
  const denied = await fetchVia('thief', '/thief/steal');
  assert.equal(denied.name, 'TypeError');
  assert.match(denied.message, /egress denied/);
  assert.equal(seen.length, before, 'the upstream got nothing from the thief');
});

test('a revoked grant stops the injection even for rules deployed before it', async () => {
  const grant = await node.control('PUT', '/v1/secrets/SHOP_TOKEN/workers/thief');
  assert.equal(grant.status, 200, grant.text);
  assert.deepEqual(grant.json.workers.sort(), ['shop', 'thief']);
  const set = await node.control('PUT', '/v1/workers/thief/egress', { body: rules('SHOP_TOKEN', '/thief/') });
  assert.equal(set.status, 200, set.text);
  const granted = await fetchVia('thief', '/thief/with-grant');
  assert.equal(JSON.parse(granted.body).authorization, `Bearer ${SHOP_TOKEN}`);

  const revoke = await node.control('DELETE', '/v1/secrets/SHOP_TOKEN/workers/thief');
  assert.equal(revoke.status, 200, revoke.text);
  assert.deepEqual(revoke.json.workers, ['shop']);
  const before = seen.length;
  const r = await fetchVia('thief', '/thief/after-revoke');
  assert.equal(r.ok, false, JSON.stringify(r));
  assert.equal(r.name, 'TypeError');
  assert.equal(r.message, `secret "SHOP_TOKEN" is not granted to worker thief (the egress rule for 127.0.0.1 injects it)`);
  assert.equal(seen.length, before, 'nothing was sent upstream');
  // revoking again is a no-op; the owner is unaffected
  assert.deepEqual((await node.control('DELETE', '/v1/secrets/SHOP_TOKEN/workers/thief')).json.workers, ['shop']);
  assert.equal(JSON.parse((await fetchVia('shop', '/shop/still')).body).authorization, `Bearer ${SHOP_TOKEN}`);
  // and a redeploy of the thief with those rules is refused again
  assert.equal((await deploy('thief', rules('SHOP_TOKEN', '/thief/'))).status, 400);
});

test('a value set without "workers" keeps the grants; a new secret without them is granted to no one', async () => {
  const rot = await node.control('PUT', '/v1/secrets/SHOP_TOKEN', { body: `${ROTATED}\n`, headers: { 'content-type': 'text/plain' } });
  assert.equal(rot.status, 200, rot.text);
  assert.deepEqual(rot.json.workers, ['shop']);
  assert.equal(JSON.parse((await fetchVia('shop', '/shop/rotated')).body).authorization, `Bearer ${ROTATED}`);

  const fresh = await node.control('PUT', '/v1/secrets/NOBODYS', { body: 'x', headers: { 'content-type': 'text/plain' } });
  assert.equal(fresh.status, 201, fresh.text);
  assert.deepEqual(fresh.json.workers, []);
  const r = await deploy('shop', rules('NOBODYS', '/shop/'));
  assert.equal(r.status, 400);
  assert.equal(r.json.error, 'secret NOBODYS is not granted to worker shop');

  // a grant may come before the value: the fetch then says the value is missing
  assert.equal((await node.control('PUT', '/v1/secrets/LATER/workers/shop')).status, 200);
  assert.equal((await deploy('shop', rules('LATER', '/shop/'))).status, 200);
  const missing = await fetchVia('shop', '/shop/later');
  assert.match(missing.message, /secret "LATER" is not set/);
  const list = await node.control('GET', '/v1/secrets');
  const later = list.json.secrets.find((s) => s.name === 'LATER');
  assert.deepEqual(later, { name: 'LATER', workers: ['shop'], updated_at: null });
  assert.deepEqual(list.json.secrets.find((s) => s.name === 'SHOP_TOKEN').workers, ['shop']);
  // deleting a secret deletes its grants
  assert.equal((await node.control('DELETE', '/v1/secrets/LATER')).status, 200);
  assert.equal((await node.control('DELETE', '/v1/secrets/LATER')).status, 404);
  assert.equal((await deploy('shop', rules('LATER', '/shop/'))).status, 400);
  assert.equal((await deploy('shop', rules())).status, 200);
});

test('grants survive a restart of the egress process', async () => {
  const ready = node.logsMatching((l) => l.json?.msg === 'egress ready' && l.json.process === 'egress');
  const pid = ready.at(-1).json.pid;
  const from = node.logs.length;
  process.kill(pid, 'SIGKILL');
  await node.waitForLog((l) => l.json?.msg === 'egress ready' && l.json.pid !== pid, { from, timeout: 10000, what: 'a new egress' });
  const r = await fetchVia('shop', '/shop/after-restart');
  assert.equal(JSON.parse(r.body).authorization, `Bearer ${ROTATED}`);
  // the thief's stored rules (from the revocation test) still inject nothing
  const thief = await fetchVia('thief', '/thief/after-restart');
  assert.match(thief.message, /secret "SHOP_TOKEN" is not granted to worker thief/);
});

test('bad grants are refused with a clear error', async () => {
  const cases = [
    [{ value: 'v', workers: 'shop' }, /"workers" must be an array of worker names/],
    [{ value: 'v', workers: ['Not_A_Worker'] }, /"workers" must be an array of worker names/],
    [{ value: 'v', workers: [3] }, /"workers" must be an array of worker names/],
    [{ value: 'v', worker: ['shop'] }, /a JSON body is \{"value"/],
  ];
  for (const [body, message] of cases) {
    const r = await node.control('PUT', '/v1/secrets/BAD_GRANT', { body });
    assert.equal(r.status, 400, `${JSON.stringify(body)}: ${r.text}`);
    assert.match(r.json.error, message);
  }
  const many = await node.control('PUT', '/v1/secrets/BAD_GRANT', { body: { value: 'v', workers: Array.from({ length: 1025 }, (_, i) => `w${i}`) } });
  assert.equal(many.status, 400);
  assert.match(many.json.error, /at most 1024 workers/);
  const badWorker = await node.control('PUT', '/v1/secrets/SHOP_TOKEN/workers/Bad_Name');
  assert.equal(badWorker.status, 400);
  assert.match(badWorker.json.error, /invalid worker name/);
  assert.equal((await node.control('GET', '/v1/secrets/SHOP_TOKEN/workers/shop')).status, 405);
  assert.equal((await node.control('PUT', '/v1/secrets/bad-name/workers/shop')).status, 400);
  const dup = await node.control('PUT', '/v1/secrets/DUP', { body: { value: 'v', workers: ['a', 'a', 'b'] } });
  assert.deepEqual(dup.json.workers, ['a', 'b']);
  assert.ok(!(await node.control('GET', '/v1/secrets')).json.secrets.some((s) => s.name === 'BAD_GRANT'));
});

test('a cordoned tenant in its own process still gets its own secret injected (the egress binds that process to it)', async () => {
  const c = await node.control('POST', '/v1/tenants/shop/cordon', { body: { reason: 'test' } });
  assert.equal(c.status, 200, c.text);
  try {
    const t = await dedicatedReady(node, 'shop');
    const info = await node.nodeInfo();
    assert.ok(t.dedicated.pid > 0, JSON.stringify(info.dedicated ?? {}));
    const r = await fetchVia('shop', '/shop/cordoned');
    assert.equal(r.status, 200, JSON.stringify(r));
    // (an earlier test rotated the value)
    assert.ok([`Bearer ${SHOP_TOKEN}`, `Bearer ${ROTATED}`].includes(JSON.parse(r.body).authorization), r.body);
  } finally {
    const u = await node.control('POST', '/v1/tenants/shop/uncordon');
    assert.equal(u.status, 200, u.text);
  }
});

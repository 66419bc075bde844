// POST /v1/node/undrain: a drain asked for through the API is undone without
// a restart, on the same ingress port, with new worker processes.
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { dedicatedReady, startNode, waitFor } from './lib/node.mjs';

const HELLO = `export default { fetch() { return new Response('alive'); } };\n`;
const HOLD = `
export default {
  async fetch(request) {
    const ms = Number(new URL(request.url).searchParams.get('ms') ?? 0);
    console.log('holding');
    await new Promise((r) => setTimeout(r, ms));
    return new Response('held ' + ms);
  }
};
`;

function connectOutcome(port) {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: '127.0.0.1' });
    s.on('connect', () => { s.destroy(); resolve('connected'); });
    s.on('error', (e) => resolve(e.code));
  });
}

const state = async (node) => (await node.nodeInfo()).state;

test('a drained node is undrained: ready again, same port, new processes serving', async (t) => {
  const node = await startNode({ workers: 2 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('hello', HELLO);

  const idle = await node.control('POST', '/v1/node/undrain');
  assert.equal(idle.status, 200, idle.text);
  assert.deepEqual(idle.json, { state: 'serving', undrained: false });

  const before = await node.workerPids();
  const d = await node.control('POST', '/v1/node/drain');
  assert.ok([200, 202].includes(d.status), d.text);
  await waitFor(async () => (await state(node)) === 'drained', { timeout: 20000, what: 'drained' });
  assert.equal((await node.control('GET', '/readyz', { token: null })).status, 503);
  assert.equal(await connectOutcome(node.listenPort), 'ECONNREFUSED');

  const u = await node.control('POST', '/v1/node/undrain');
  assert.equal(u.status, 200, u.text);
  assert.equal(u.json.state, 'serving');
  assert.equal(u.json.undrained, true);
  assert.equal(u.json.listen, `127.0.0.1:${node.listenPort}`);
  await waitFor(async () => (await node.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 20000, what: 'readyz 200 again' });
  for (let i = 0; i < 6; i++) assert.equal((await node.ingress('hello', '/')).text, 'alive');
  const after = await node.workerPids();
  assert.equal(after.length, 2);
  assert.ok(after.every((p) => !before.includes(p)), `${before} -> ${after}`);
  // deploys are taken again
  assert.equal((await node.deploy('hello', HELLO)).status, 200);
  const ev = (await node.control('GET', '/v1/events?kind=undrain')).json.events;
  assert.equal(ev.length, 1);

  // and it drains again as before
  await node.control('POST', '/v1/node/drain');
  await waitFor(async () => (await state(node)) === 'drained', { timeout: 20000, what: 'drained again' });
});

test('an undrain while the drain is under way is refused, and the drain goes on', async (t) => {
  const node = await startNode({ workers: 1 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('hold', HOLD);
  // a request in flight holds the drain open until it is answered
  const held = node.ingress('hold', '/?ms=1500');
  await node.waitForLog((l) => l.json?.tenant === 'hold' && l.json.msg === 'holding',
    { timeout: 10000, what: 'the request in the isolate' });
  await node.control('POST', '/v1/node/drain');
  const u = await node.control('POST', '/v1/node/undrain');
  assert.equal(u.status, 409, u.text);
  assert.match(u.json.error, /drain is still under way/);
  assert.equal((await held).text, 'held 1500');
  await waitFor(async () => (await state(node)) === 'drained', { timeout: 20000, what: 'drained' });
  assert.equal((await node.control('POST', '/v1/node/undrain')).status, 200);
  assert.equal((await node.control('GET', '/v1/node/undrain')).status, 405);
});

test('a cordoned tenant is served from a dedicated process again after an undrain', async (t) => {
  const node = await startNode({ workers: 1 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('apart', HELLO, { json: true, limits: { cpu_ms: 400 } });
  assert.equal((await node.control('POST', '/v1/tenants/apart/cordon', { body: { reason: 'test' } })).status, 200);
  const before = await dedicatedReady(node, 'apart');
  assert.equal((await node.ingress('apart', '/')).text, 'alive');
  await node.control('POST', '/v1/node/drain');
  await waitFor(async () => (await state(node)) === 'drained', { timeout: 20000, what: 'drained' });
  assert.equal((await node.control('POST', '/v1/node/undrain')).status, 200);
  await waitFor(async () => (await node.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 20000, what: 'readyz 200 again' });
  let last = '';
  await waitFor(async () => {
    const r = await node.ingress('apart', '/');
    last = `${r.status} ${r.text}`;
    return r.status === 200 && r.text === 'alive';
  }, { timeout: 20000, what: 'the cordoned tenant served again' }).catch((err) => {
    throw new Error(`${err.message}; last answer: ${last}`);
  });
  const after = await dedicatedReady(node, 'apart', { notPid: before.dedicated.pid });
  assert.equal(after.state, 'cordoned');
});

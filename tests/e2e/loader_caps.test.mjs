// A tenant's dynamic workers are capped per worker process: live children
// (limits.children) and pinned ones, kept alive by work nobody waits for
// (limits.pinned_children). Five parents pinning children by the dozen
// must not fill the process's maximum of isolates (--max-isolates, low
// here) for a neighbour.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { runEdgenode, startNode, tempDir, waitFor, workerList, writeFile } from './lib/node.mjs';

const MAX_ISOLATES = 130;
let node;

before(async () => {
  const configFile = writeFile(tempDir(), 'edgenode.json',
    JSON.stringify({ cordon_rules: [], max_isolates: MAX_ISOLATES }));
  node = await startNode({ workers: 1, configFile });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

const LOADER = { LOADER: { type: 'loader' } };

async function isolates() {
  const [proc] = workerList(await node.nodeInfo());
  return proc?.isolates;
}

// Loads `n` children whose fetch() answers at once and leaves a
// ctx.waitUntil() that never settles; the parent's own request does the
// same, so that neither it nor its children are ever idle.
const PINNER = `export default {
  async fetch(request, env, ctx) {
    const n = Number(new URL(request.url).searchParams.get('n'));
    const child = 'export default { fetch(request, env, ctx) { ' +
      'ctx.waitUntil(new Promise(() => {})); return new Response("pinned"); } };';
    const answers = [];
    for (let i = 0; i < n; i++) {
      const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js',
        modules: { 'c.js': child + ' // ' + i } });
      answers.push(await stub.getEntrypoint().fetch('http://c/').then((r) => r.text(), (e) => e.message));
    }
    ctx.waitUntil(new Promise(() => {}));
    return Response.json(answers);
  },
};`;

// Starts `n` children at once, each busy for `ms`: all live together.
const HOLDER = `export default {
  async fetch(request) {
    const url = new URL(request.url);
    const n = Number(url.searchParams.get('n'));
    const child = 'export default { async fetch() { await scheduler.wait(' + url.searchParams.get('ms') +
      '); return new Response("held"); } };';
    const stubs = [];
    for (let i = 0; i < n; i++) {
      stubs.push(this.env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js',
        modules: { 'c.js': child } }));
    }
    return Response.json(await Promise.all(stubs.map((s) =>
      s.getEntrypoint().fetch('http://c/').then((r) => r.text(), (e) => e.message))));
  },
};`.replace('async fetch(request) {', 'async fetch(request, env) { this.env = env;');

test('five parents pinning 40 children each do not fill the process: a neighbour is served', async () => {
  const parents = ['p0', 'p1', 'p2', 'p3', 'p4'];
  for (const p of parents) {
    await node.deployOk(p, { 'index.js': PINNER },
      { bindings: LOADER, limits: { cpu_ms: 5000, wall_ms: 5000 } });
  }
  for (const p of parents) {
    const r = await node.ingress(p, '/?n=40', { timeout: 30000 });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, Array(40).fill('pinned'), `${p}: ${r.text}`);
  }
  // Each tenant keeps its 20 pinned children at most (the default), not 40
  // (the process reports its isolates every second).
  await waitFor(async () => (await isolates()) !== undefined, { what: 'a report of the isolates' });
  const held = await isolates();
  assert.ok(held <= 5 * 21, `isolates held: ${held}`);
  assert.ok(node.logsMatching((l) => /pinned dynamic workers \(limit 20, limits.pinned_children\)/.test(l.json?.msg ?? '')).length > 0,
    'no log line for the pinned children discarded');
  await node.deployOk('neighbour', 'export default { fetch() { return new Response("neighbour"); } };');
  const r = await node.ingress('neighbour', '/');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.text, 'neighbour');
});

test('pinned parents and children are let go after twice their wall time', async () => {
  // wall_ms 5000 above: their never-settling ctx.waitUntil() is let go at
  // 10 s, the parents' and the children's alike, and the children go.
  await waitFor(async () => (await isolates()) <= 6,
    { timeout: 30000, interval: 500, what: 'the pinned isolates to go' });
  for (const p of ['p0', 'p1', 'p2', 'p3', 'p4']) await node.control('DELETE', `/v1/workers/${p}`);
});

test('past limits.children a new child is refused with a clear error; the others run', async () => {
  await node.deployOk('holder', { 'index.js': HOLDER },
    { bindings: LOADER, limits: { cpu_ms: 5000, wall_ms: 20000, children: 5 } });
  const r = await node.ingress('holder', '/?n=8&ms=1000', { timeout: 30000 });
  assert.equal(r.status, 200, r.text);
  const held = r.json.filter((a) => a === 'held');
  const refused = r.json.filter((a) => /^too many live children: 5 \(limit 5, limits\.children\): let some finish first$/.test(a));
  assert.equal(held.length, 5, r.text);
  assert.equal(refused.length, 3, r.text);
  // Once they are done, there is room again.
  const again = await node.ingress('holder', '/?n=5&ms=10', { timeout: 30000 });
  assert.deepEqual(again.json, Array(5).fill('held'), again.text);
  await node.control('DELETE', '/v1/workers/holder');
});

test('the default is 100 live children per tenant', async () => {
  await node.deployOk('crowd', { 'index.js': HOLDER },
    { bindings: LOADER, limits: { cpu_ms: 10000, wall_ms: 30000 } });
  const r = await node.ingress('crowd', '/?n=104&ms=1500', { timeout: 60000 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.filter((a) => a === 'held').length, 100, r.text);
  assert.equal(r.json.filter((a) => /^too many live children: 100 \(limit 100/.test(a)).length, 4, r.text);
  await node.control('DELETE', '/v1/workers/crowd');
});

test('bad values of limits.children and limits.pinned_children are refused at deploy', async () => {
  for (const [key, value] of [['children', 0], ['children', 1001], ['children', 'ten'],
    ['pinned_children', 0], ['pinned_children', 2.5]]) {
    const r = await node.deploy('badcaps', { 'index.js': 'export default {};' }, { limits: { [key]: value } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error, `limits: "${key}": must be an integer between 1 and 1000`);
    assert.equal(r.json.limit, key);
  }
});

test('--max-isolates out of range is refused at start', async () => {
  const res = await runEdgenode(['--max-isolates', '5', '--data', tempDir()]);
  assert.notEqual(res.code, 0);
  assert.match(res.stderr, /max.isolates.*must be an integer between 16 and 20000/);
});

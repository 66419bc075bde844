// Gradual deployments: PUT /v1/workers/{name}/traffic splits requests over
// kept versions, sticky by the X-Edgenode-Traffic-Key header (else the
// client's address); a deploy or a rollback ends the split; it survives a
// restart; `edgectl traffic`.
import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { EDGECTL, runProcess, startNode, tempDir } from './lib/node.mjs';

let node;
const data = tempDir();

const code = (v) => `export default { fetch() { return new Response("v${v}"); } };`;

before(async () => {
  node = await startNode({ workers: 2, dataDir: data });
  for (const v of [1, 2, 3]) await node.deployOk('split', code(v));
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

const traffic = (body, opts = {}) => node.control('PUT', '/v1/workers/split/traffic', { body, ...opts });

async function served(key) {
  const r = await node.ingress('split', '/', { headers: { 'x-edgenode-traffic-key': key } });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.headers['x-edgenode-version'], r.text.slice(1), 'the header names the version that answered');
  return r.text;
}

async function spread(n) {
  const byKey = new Map();
  for (let i = 0; i < n; i++) byKey.set(`user-${i}`, await served(`user-${i}`));
  return byKey;
}

test('a 50/50 split serves both versions, each key always the same one', async () => {
  const r = await traffic({ 3: 50, 2: 50 });
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { name: 'split', current: 3, gradual: true,
    split: [{ version: 3, percent: 50 }, { version: 2, percent: 50 }] });
  const first = await spread(200);
  const counts = { v2: 0, v3: 0 };
  for (const v of first.values()) counts[v]++;
  assert.ok(counts.v2 > 0 && counts.v3 > 0, JSON.stringify(counts));
  assert.equal(counts.v2 + counts.v3, 200);
  const again = await spread(200);
  assert.deepEqual([...again], [...first]);
  // Without the header, the client's address is the key: one version, always.
  const plain = new Set();
  for (let i = 0; i < 10; i++) plain.add((await node.ingress('split', '/')).text);
  assert.equal(plain.size, 1);
  const get = await node.control('GET', '/v1/workers/split/traffic');
  assert.deepEqual(get.json.split, [{ version: 3, percent: 50 }, { version: 2, percent: 50 }]);
});

test('100/0: every key gets the one version', async () => {
  const r = await traffic({ 1: 100, 3: 0 });
  assert.equal(r.status, 200, r.text);
  const seen = new Set((await spread(50)).values());
  assert.deepEqual([...seen], ['v1']);
});

test('the split survives a restart (node.db)', async () => {
  await node.stop({ clean: false });
  node = await startNode({ workers: 2, dataDir: data });
  const get = await node.control('GET', '/v1/workers/split/traffic');
  assert.deepEqual(get.json.split, [{ version: 3, percent: 0 }, { version: 1, percent: 100 }]);
  assert.equal(await served('anyone'), 'v1');
});

test('a deploy or a rollback ends the split: all to the new version', async () => {
  await traffic({ 3: 50, 2: 50 });
  const d = await node.deployOk('split', code(4));
  assert.equal(d.json.version, 4);
  let get = await node.control('GET', '/v1/workers/split/traffic');
  assert.deepEqual(get.json, { name: 'split', current: 4, gradual: false, split: [{ version: 4, percent: 100 }] });
  const plain = await node.ingress('split', '/', { headers: { 'x-edgenode-traffic-key': 'k' } });
  assert.equal(plain.text, 'v4');
  assert.equal(plain.headers['x-edgenode-version'], undefined, 'no split, no header');
  await traffic({ 4: 50, 3: 50 });
  const rb = await node.control('POST', '/v1/workers/split/rollback', { body: { version: 2 } });
  assert.equal(rb.status, 200, rb.text);
  get = await node.control('GET', '/v1/workers/split/traffic');
  assert.equal(get.json.gradual, false);
  assert.equal(get.json.current, 5);
  const back = await node.ingress('split', '/', { headers: { 'x-edgenode-traffic-key': 'k' } });
  assert.equal(back.text, 'v2');
  // DELETE ends a split too.
  await traffic({ 5: 50, 4: 50 });
  const del = await node.control('DELETE', '/v1/workers/split/traffic');
  assert.equal(del.status, 200, del.text);
  assert.equal(del.json.gradual, false);
});

test('a streamed answer says its version too', async () => {
  const streamed = (v) => `export default { fetch() {
  const { readable, writable } = new TransformStream();
  const w = writable.getWriter();
  (async () => { await scheduler.wait(1); await w.write(new TextEncoder().encode('v${v}')); await w.close(); })();
  return new Response(readable);
} };`;
  await node.deployOk('streamer', streamed(1));
  await node.deployOk('streamer', streamed(2));
  assert.equal((await node.control('PUT', '/v1/workers/streamer/traffic', { body: { 1: 50, 2: 50 } })).status, 200);
  const seen = new Set();
  for (let i = 0; i < 40; i++) {
    const r = await node.ingress('streamer', '/', { headers: { 'x-edgenode-traffic-key': `k${i}` } });
    assert.equal(r.headers['transfer-encoding'], 'chunked');
    assert.equal(`v${r.headers['x-edgenode-version']}`, r.text);
    seen.add(r.text);
  }
  assert.equal(seen.size, 2);
});

test('bad splits are 400 (404 for what does not exist, 401 without the token), and change nothing', async () => {
  const bad = [
    [{ 5: 90, 4: 5 }, 400, /add up to 95, not 100/],
    [{ 5: 110, 4: -10 }, 400, /version 4: the percentage must be an integer from 0 to 100/],
    [{ 5: -10, 4: 110 }, 400, /version 4: the percentage must be an integer from 0 to 100/],
    [{ 5: 50.5, 4: 49.5 }, 400, /the percentage must be an integer/],
    [{ 5: '50', 4: 50 }, 400, /the percentage must be an integer/],
    [{ v5: 50, 4: 50 }, 400, /"v5": a version is a positive integer/],
    [{ '05': 50, 4: 50 }, 400, /a version is a positive integer/],
    [{}, 400, /1 to 4 versions/],
    [[50, 50], 400, /JSON object/],
    ['not json', 400, /JSON object/],
    [{ 5: 20, 4: 20, 3: 20, 2: 20, 1: 20 }, 400, /1 to 4 versions/],
    [{ 5: 50, 99: 50 }, 404, /version 99 of worker split is not kept/],
  ];
  for (const [body, status, re] of bad) {
    const r = await traffic(body);
    assert.equal(r.status, status, `${JSON.stringify(body)}: ${r.text}`);
    assert.match(r.json.error, re, JSON.stringify(body));
  }
  const unknown = await node.control('PUT', '/v1/workers/nobody/traffic', { body: { 1: 100 } });
  assert.equal(unknown.status, 404, unknown.text);
  assert.equal(unknown.json.error, 'unknown worker');
  assert.equal((await node.control('GET', '/v1/workers/nobody/traffic')).status, 404);
  const noToken = await traffic({ 5: 100 }, { token: null });
  assert.equal(noToken.status, 401, noToken.text);
  const method = await node.control('POST', '/v1/workers/split/traffic', { body: {} });
  assert.equal(method.status, 405);
  const get = await node.control('GET', '/v1/workers/split/traffic');
  assert.equal(get.json.gradual, false);
});

test('edgectl traffic NAME N=P ...: sets and shows the split', async () => {
  const ctl = (args) => runProcess(EDGECTL, ['--node', `http://127.0.0.1:${node.controlPort}`,
    '--token-file', path.join(node.dataDir, 'control.token'), ...args]);
  const set = await ctl(['traffic', 'split', '5=70', '4=30']);
  assert.equal(set.code, 0, set.stderr + set.stdout);
  assert.match(set.stdout, /5\s+70%/);
  assert.match(set.stdout, /4\s+30%/);
  const show = await ctl(['traffic', 'split', '--json']);
  assert.equal(show.code, 0, show.stderr);
  assert.deepEqual(JSON.parse(show.stdout).split, [{ version: 5, percent: 70 }, { version: 4, percent: 30 }]);
  const bad = await ctl(['traffic', 'split', '5=70', '4=20']);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /add up to 90, not 100/);
  const usage = await ctl(['traffic', 'split', '5:70']);
  assert.equal(usage.code, 2, usage.stderr);
  assert.match(usage.stderr, /VERSION=PERCENT/);
  const help = await ctl(['help', 'traffic']);
  assert.match(help.stdout + help.stderr, /edgectl traffic NAME/);
});

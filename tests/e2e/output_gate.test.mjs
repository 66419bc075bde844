// Write coalescing and the output gate (docs/workers.md, "Durability"):
// the writes of a synchronous run are one commit, made durable before
// anything the run produced leaves the process: the response, each chunk of
// a streamed one, an outbound fetch. Each test reads the facet file with the
// sqlite3 CLI at the moment the client or the upstream hears from the
// worker, so "durable before it left" is what is checked, not inferred.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { SOURCE_DIR, missingInput, startNode } from './lib/node.mjs';

const GATE = readFileSync(path.join(SOURCE_DIR, 'tests', 'e2e', 'fixtures', 'facets', 'gate.js'), 'utf8');
const hasSqlite = spawnSync('sqlite3', ['-version'], { encoding: 'utf8' }).status === 0;

let node;
let upstream;
let upstreamPort;
let facetFile;
// What the upstream found in the facet file when each request reached it.
const seenByUpstream = [];

function rowsTagged(tag) {
  const r = spawnSync('sqlite3', ['-batch', facetFile, `SELECT count(*) FROM t WHERE tag = '${tag}'`],
    { encoding: 'utf8', timeout: 30000 });
  if (r.status !== 0) throw new Error(`sqlite3: ${r.stderr}`);
  return Number(r.stdout.trim());
}

function needSqlite(t) {
  if (hasSqlite) return true;
  missingInput(t, 'the sqlite3 CLI is not installed', 'apt-get install sqlite3');
  return false;
}

before(async () => {
  upstream = http.createServer((req, res) => {
    const tag = new URL(req.url, 'http://x').searchParams.get('tag');
    let rows = -1;
    try { rows = rowsTagged(tag); } catch { /* reported as -1 */ }
    seenByUpstream.push({ tag, rows });
    res.end(`upstream saw ${rows}`);
  });
  await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamPort = upstream.address().port;
  node = await startNode({ workers: 1, extraArgs: ['--egress-allow-cidr', '127.0.0.1/32'] });
  await node.deployOk('gate', { 'index.js': GATE }, {
    bindings: { DB: { type: 'facet' }, LOADER: { type: 'loader' } },
    egress: [{ match: `http://127.0.0.1:${upstreamPort}/` }],
    limits: { cpu_ms: 200 },
  });
  facetFile = path.join(node.dataDir, 'facets', 'gate.sqlite');
});

after(async () => {
  if (node) await node.stop();
  if (upstream) upstream.close();
});

test('a run\'s writes are durable when its response arrives', async (t) => {
  if (!needSqlite(t)) return;
  for (const n of [1, 300]) {
    const r = await node.ingress('gate', `/many?n=${n}&tag=many${n}`, { method: 'POST' });
    assert.equal(r.status, 200, r.text);
    assert.equal(rowsTagged(`many${n}`), n, `all ${n} rows are in the file when the answer is in`);
  }
});

test('an outbound fetch leaves only once the writes before it are durable', async (t) => {
  if (!needSqlite(t)) return;
  const target = `http://127.0.0.1:${upstreamPort}/check?tag=fetched`;
  const r = await node.ingress('gate', `/then-fetch?tag=fetched&url=${encodeURIComponent(target)}`, { method: 'POST' });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.text, 'upstream saw 1');
  assert.deepEqual(seenByUpstream.at(-1), { tag: 'fetched', rows: 1 });
});

test('fetch() inside transactionSync() fails with a clear error and never leaves', async () => {
  const target = `http://127.0.0.1:${upstreamPort}/check?tag=in-txn`;
  const before = seenByUpstream.length;
  const r = await node.ingress('gate', `/fetch-in-txn?url=${encodeURIComponent(target)}`, { method: 'POST' });
  assert.equal(r.status, 200, r.text);
  assert.match(r.text, /^Error: fetch\(\) cannot be called inside transactionSync\(\)/);
  assert.equal(seenByUpstream.length, before, 'the upstream heard nothing');
  const c = await node.ingress('gate', '/count?tag=in-txn');
  assert.equal(c.json, 1, 'the transaction itself returned and was kept');
});

test('each chunk of a streamed response leaves after the writes before it', async (t) => {
  if (!needSqlite(t)) return;
  const port = node.listenPort;
  const chunks = [];
  await new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: '127.0.0.1' }, () => {
      sock.write('POST /stream?tag=streamed HTTP/1.1\r\nHost: gate.localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
    });
    let text = '';
    sock.on('data', (d) => {
      text += d.toString();
      // When each line of the body arrives, count the rows that are in the file.
      for (const word of ['first', 'second']) {
        if (text.includes(`${word}\n`) && !chunks.some((c) => c.word === word)) {
          chunks.push({ word, rows: rowsTagged('streamed') });
        }
      }
    });
    sock.on('end', resolve);
    sock.on('error', reject);
  });
  assert.deepEqual(chunks, [{ word: 'first', rows: 1 }, { word: 'second', rows: 2 }]);
});

test('a write made in a timer callback is durable when the response that waited for it arrives', async (t) => {
  if (!needSqlite(t)) return;
  const r = await node.ingress('gate', '/timer?tag=timer', { method: 'POST' });
  assert.equal(r.status, 200, r.text);
  assert.equal(rowsTagged('timer'), 1);
});

test('VACUUM runs in a run that wrote before it, and both sides of it are kept', async () => {
  const r = await node.ingress('gate', '/vacuum?tag=vac', { method: 'POST' });
  assert.equal(r.status, 200, r.text);
  const c = await node.ingress('gate', '/count?tag=vac');
  assert.equal(c.json, 2);
});

test('a run cut short at the CPU limit keeps none of its writes, and the isolate is made anew', async () => {
  let g = await node.ingress('gate', '/generation');
  assert.equal(g.status, 200);
  const before = g.json;
  const r = await node.ingress('gate', '/then-spin?tag=spun', { method: 'POST' });
  assert.equal(r.status, 503, r.text);
  assert.match(r.json.error, /exceeded CPU limit/);
  const c = await node.ingress('gate', '/count?tag=spun');
  assert.equal(c.status, 200, c.text);
  assert.equal(c.json, 0, 'the row written before the spin is not there');
  g = await node.ingress('gate', '/generation');
  assert.ok(g.json <= before, `a fresh isolate counts from 1 again (was ${before}, now ${g.json})`);
});

test('an uncaught exception after a write still stores the write, as Durable Objects do', async () => {
  const r = await node.ingress('gate', '/then-throw?tag=thrown', { method: 'POST' });
  assert.equal(r.status, 500, r.text);
  const c = await node.ingress('gate', '/count?tag=thrown');
  assert.equal(c.json, 1);
});

for (const via of ['respond', 'vacuum', 'child']) {
  test(`a commit that fails at ${via === 'respond' ? 'the response' : via === 'vacuum' ? "VACUUM's early gate" : 'a gate a loader child reaches'} turns the response into a 500 and resets the isolate`, async () => {
    const tag = `fail-${via}`;
    const g0 = (await node.ingress('gate', '/generation')).json;
    const r = await node.ingress('gate', `/commit-fails?tag=${tag}&via=${via}`, { method: 'POST' });
    assert.equal(r.status, 500, r.text);
    assert.match(r.json.error, /^the worker's writes could not be stored: facet gate: FOREIGN KEY constraint failed/);
    const c = await node.ingress('gate', `/count?tag=${tag}`);
    assert.equal(c.status, 200, c.text);
    // what the client was refused is not half there either: the row written
    // before the failing commit went with it; the one after is in a commit
    // of its own only when the gate that failed came before it
    assert.ok(c.json <= 1, `rows kept: ${c.json}`);
    assert.ok((await node.ingress('gate', '/generation')).json <= g0, 'the isolate was made anew');
  });
}

// Requests of one tenant that run in one turn of the loop share a commit
// (worker/gate.c): whatever the batch, an answered write is stored and a
// refused one is not.
test('concurrent writes share commits: every acknowledged row is stored, every refused one is not', async (t) => {
  if (!needSqlite(t)) return;
  for (let round = 0; round < 5; round++) {
    const writes = Array.from({ length: 12 }, (_, i) =>
      node.ingress('gate', `/many?n=1&tag=batch${round}-${i}`, { method: 'POST' }));
    // a commit that fails, in the middle of them
    const failing = node.ingress('gate', `/commit-fails?tag=batchfail${round}&via=respond`, { method: 'POST' });
    const answers = await Promise.all(writes);
    assert.equal((await failing).status, 500);
    answers.forEach((r, i) => {
      const rows = rowsTagged(`batch${round}-${i}`);
      if (r.status === 200) assert.equal(rows, 1, `round ${round}: write ${i} was acknowledged but is not stored`);
      else assert.equal(rows, 0, `round ${round}: write ${i} was refused (${r.status}) but is stored`);
    });
  }
});

test("a tenant's run cut short keeps another tenant's writes of the same turn", async () => {
  await node.deployOk('gate2', { 'index.js': GATE }, {
    bindings: { DB: { type: 'facet' }, LOADER: { type: 'loader' } },
    limits: { cpu_ms: 200 },
  });
  for (let round = 0; round < 3; round++) {
    const others = Array.from({ length: 10 }, () =>
      node.ingress('gate2', `/many?n=1&tag=kept${round}`, { method: 'POST' }));
    const spin = await node.ingress('gate', `/then-spin?tag=spun${round}`, { method: 'POST' });
    assert.equal(spin.status, 503, spin.text);
    const answers = await Promise.all(others);
    for (const r of answers) assert.equal(r.status, 200, r.text);
    const c = await node.ingress('gate2', `/count?tag=kept${round}`);
    assert.equal(c.json, 10, 'the other tenant\'s ten writes are all there');
  }
});

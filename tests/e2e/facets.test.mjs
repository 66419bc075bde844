// Facets end to end: env.DB through deployed workers. The JavaScript API
// (fixtures/facets/api.js checks itself), isolation between two workers,
// limits, the operators' endpoints, and durability: a client writes numbered
// rows while worker processes are killed with SIGKILL at random moments;
// every row whose request got a 200 must be in the file afterwards, and the
// file must pass PRAGMA integrity_check.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { RawConn, SOURCE_DIR, sleep, startNode, tempDir, waitFor } from './lib/node.mjs';

const FIXTURES = path.join(SOURCE_DIR, 'tests', 'e2e', 'fixtures', 'facets');
const API = readFileSync(path.join(FIXTURES, 'api.js'), 'utf8');
const COUNTER = readFileSync(path.join(FIXTURES, 'counter.js'), 'utf8');
const DB = { DB: { type: 'facet' } };

const hasSqlite = spawnSync('sqlite3', ['-version'], { encoding: 'utf8' }).status === 0;

// Runs the sqlite3 CLI on a facet file; returns its output lines.
function sqlite(file, ...statements) {
  const r = spawnSync('sqlite3', ['-batch', file, ...statements], { encoding: 'utf8', timeout: 60000 });
  if (r.status !== 0) throw new Error(`sqlite3 ${file}: ${r.stderr}`);
  return r.stdout.split('\n').filter((l) => l.length > 0);
}

let node;

before(async () => {
  node = await startNode({ workers: 2 });
});

after(async () => {
  if (node) await node.stop();
});

async function deployOk(name, source, extra = {}) {
  return node.deployOk(name, { 'index.js': source }, { bindings: DB, ...extra });
}

test('the JavaScript API, checked from inside a worker', async () => {
  // generous: the suite runs many statements and a VACUUM in one request
  await deployOk('facet-api', API, { limits: { cpu_ms: 5000 } });
  // twice: both processes serve it, and a second run sees the first's file
  for (let i = 0; i < 2; i++) {
    const r = await node.ingress('facet-api', '/');
    assert.equal(r.status, 200, r.text);
    const failures = r.json.failed.map((f) => `${f.name}: ${f.error}`).join('\n');
    assert.equal(r.json.failed.length, 0, failures);
    assert.ok(r.json.passed >= 10, r.text);
  }
  assert.ok(existsSync(path.join(node.dataDir, 'facets', 'facet-api.sqlite')));
});

test('two workers cannot reach each other\'s facet', async () => {
  await deployOk('alpha', COUNTER);
  await deployOk('beta', COUNTER);
  let r = await node.ingress('alpha', '/secret?v=alpha-private-value', { method: 'POST' });
  assert.equal(r.status, 200, r.text);
  r = await node.ingress('beta', '/secret?v=beta-value', { method: 'POST' });
  assert.equal(r.status, 200, r.text);

  r = await node.ingress('beta', '/peek?other=alpha');
  assert.equal(r.status, 200, r.text);
  const tries = r.json;
  for (const k of ['attach', 'attachRelative', 'attachUri']) {
    assert.equal(tries[k].ok, false, `${k}: ${JSON.stringify(tries[k])}`);
    assert.match(tries[k].error, /ATTACH is not allowed/, k);
  }
  assert.equal(tries.vacuumInto.ok, false);
  assert.match(tries.vacuumInto.error, /VACUUM INTO is not allowed/);
  assert.equal(tries.schemaName.ok, false);
  assert.match(tries.schemaName.error, /unknown database alpha|no such table/);
  assert.deepEqual(tries.ownTable.value, [{ v: 'beta-value' }]);
  assert.equal(tries.globals.value, 'undefined undefined undefined');

  r = await node.ingress('alpha', '/secret');
  assert.equal(r.text, 'alpha-private-value');
  r = await node.ingress('beta', '/secret');
  assert.equal(r.text, 'beta-value');

  // separate files; nothing of alpha's in beta's
  const facets = path.join(node.dataDir, 'facets');
  const beta = readFileSync(path.join(facets, 'beta.sqlite'));
  assert.equal(beta.includes('alpha-private-value'), false);
  // no attempt left a file behind anywhere in the data directory
  assert.equal(existsSync(path.join(facets, 'alpha.sqlite.sqlite')), false);
  assert.equal(existsSync(path.join(SOURCE_DIR, 'alpha.sqlite')), false);
});

test('writers in two processes never see SQLITE_BUSY', async () => {
  await deployOk('contended', COUNTER);
  const failures = [];
  let next = 0;
  async function client(id) {
    for (let i = 0; i < 60; i++) {
      const n = next++;
      const r = i % 5 === 4
        ? await node.ingress('contended', `/batch?from=${100000 + n * 10}&k=10`, { method: 'POST' })
        : await node.ingress('contended', `/write?n=${n}`, { method: 'POST' });
      if (r.status !== 200) failures.push(`client ${id}: ${r.status} ${r.text}`);
    }
  }
  await Promise.all(Array.from({ length: 8 }, (_, i) => client(i)));
  assert.deepEqual(failures, []);
  const r = await node.ingress('contended', '/count');
  const batches = 8 * 12;
  assert.equal(r.json.count, 8 * 48 + batches * 10);
});

test('a facet that reaches its size limit says so, keeps nothing of that run, and stays readable', async () => {
  // Writing a megabyte costs about 20 ms of CPU, more on a busy machine.
  await deployOk('small', COUNTER, { limits: { facet_mb: 1, cpu_ms: 2000 } });
  for (let i = 0; i < 3; i++) {
    assert.equal((await node.ingress('small', `/write?n=${i}`, { method: 'POST' })).status, 200);
  }
  // SQLite drops the whole open transaction when the facet is full: the
  // run's earlier writes are gone, so its response becomes a 500 that says
  // why (the output gate), and the isolate is made anew.
  const r = await node.ingress('small', '/fill');
  assert.equal(r.status, 500, r.text);
  assert.match(r.json.error, /^the worker's writes could not be stored: facet small: facet is full: its size limit is 1 MB/);
  const c = await node.ingress('small', '/count');
  assert.equal(c.status, 200, c.text);
  assert.equal(c.json.count, 3, 'the rows of earlier requests are all there');
  const size = await node.ingress('small', '/size');
  assert.ok(size.json.size <= 1024 * 1024, size.text);
  if (hasSqlite) {
    assert.deepEqual(sqlite(path.join(node.dataDir, 'facets', 'small.sqlite'), 'PRAGMA integrity_check'), ['ok']);
  }
});

test('a runaway query stops at the CPU limit', async () => {
  await deployOk('spinner', COUNTER, { limits: { cpu_ms: 50 } });
  const t0 = Date.now();
  const r = await node.ingress('spinner', '/spin');
  assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  assert.notEqual(r.text, 'finished?!');
  assert.ok(r.status === 503 || r.text === 'Error: exceeded CPU limit', `${r.status} ${r.text}`);
  // the worker and its facet are fine afterwards
  const c = await node.ingress('spinner', '/count');
  assert.equal(c.status, 200, c.text);
});

test('operators: describe, backup while writing, redeploy and delete keep it, purge drops it', async () => {
  await deployOk('ops', COUNTER);
  for (let i = 0; i < 20; i++) {
    assert.equal((await node.ingress('ops', `/write?n=${i}`, { method: 'POST' })).status, 200);
  }
  let r = await node.control('GET', '/v1/workers/ops/facet');
  assert.equal(r.status, 200, r.text);
  const rows = Object.fromEntries(r.json.tables.map((t) => [t.name, t.rows]));
  assert.equal(rows.rows, 20);
  assert.equal(rows.secrets, 0);
  assert.ok(r.json.size_bytes > 0 && r.json.page_size > 0, r.text);
  assert.equal((await node.control('GET', '/v1/workers/nobody/facet')).status, 404);

  // a backup taken while a client keeps writing is one consistent snapshot
  let writing = true;
  let n = 1000;
  const writer = (async () => {
    while (writing) await node.ingress('ops', `/write?n=${n++}`, { method: 'POST' });
  })();
  await sleep(100);
  r = await node.control('GET', '/v1/workers/ops/facet/backup');
  writing = false;
  await writer;
  assert.equal(r.status, 200, r.text);
  assert.equal(r.body.subarray(0, 16).toString('latin1'), 'SQLite format 3\0');
  const dir = tempDir('edgenode-facet-backup-');
  const copy = path.join(dir, 'ops.sqlite');
  writeFileSync(copy, r.body);
  if (hasSqlite) {
    assert.deepEqual(sqlite(copy, 'PRAGMA integrity_check'), ['ok']);
    const inCopy = sqlite(copy, 'SELECT n FROM rows ORDER BY n').map(Number);
    const live = (await node.ingress('ops', '/ids')).json;
    assert.ok(inCopy.length >= 20, `${inCopy.length} rows in the copy`);
    // the copy is a prefix of the live facet: rows 0..19, then the writer's in order
    assert.deepEqual(inCopy, live.slice(0, inCopy.length));
    // with writes stopped, a backup restores to exactly the live rows
    r = await node.control('GET', '/v1/workers/ops/facet/backup');
    writeFileSync(copy, r.body);
    assert.deepEqual(sqlite(copy, 'SELECT n FROM rows ORDER BY n').map(Number), live);
  }

  // a redeploy keeps the facet
  await deployOk('ops', COUNTER + '\n// v2\n');
  assert.equal((await node.ingress('ops', '/count')).json.count, 20 + (n - 1000));
  // delete keeps it unless purge is asked for
  r = await node.control('DELETE', '/v1/workers/ops');
  assert.equal(r.status, 200, r.text);
  const file = path.join(node.dataDir, 'facets', 'ops.sqlite');
  assert.ok(existsSync(file));
  await deployOk('ops', COUNTER);
  await waitFor(async () => (await node.ingress('ops', '/count')).json?.count === 20 + (n - 1000),
    { what: 'the old rows after delete and deploy' });
  r = await node.control('DELETE', '/v1/workers/ops?purge=true');
  assert.equal(r.status, 200, r.text);
  assert.equal(existsSync(file), false);
  await deployOk('ops', COUNTER);
  await waitFor(async () => (await node.ingress('ops', '/count')).json?.count === 0,
    { what: 'an empty facet after purge' });
});

test('delete reads ?purge strictly: true purges, false or none keeps, anything else is 400', async () => {
  const file = path.join(node.dataDir, 'facets', 'strict.sqlite');
  let row = 0;
  async function deployWithRow() {
    await deployOk('strict', COUNTER);
    await waitFor(async () => (await node.ingress('strict', `/write?n=${++row}`, { method: 'POST' })).status === 200,
      { what: 'a row in the facet of strict' });
    assert.ok(existsSync(file), 'the facet file exists');
  }
  await deployWithRow();
  // refused before anything is deleted: the worker and its facet stay
  for (const query of ['purge=1', 'purge=TRUE', 'purge=yes', 'purge=truex', 'purge=', 'purge',
    'purge=true&purge=true', 'purge=false&purge=true', 'purge=%zz']) {
    const r = await node.control('DELETE', `/v1/workers/strict?${query}`);
    assert.equal(r.status, 400, `${query}: ${r.text}`);
    assert.equal(r.json.key, 'purge', r.text);
    assert.deepEqual(r.json.accepted, ['true', 'false'], r.text);
    assert.match(r.json.error, /true or false/);
    assert.equal((await node.control('GET', '/v1/workers/strict')).status, 200, `${query}: still deployed`);
    assert.ok(existsSync(file), `${query}: the facet stays`);
  }
  // kept: no purge parameter, purge=false, other parameters that merely contain the text
  for (const query of ['', '?nopurge=true', '?xpurge=true', '?purge=false', '?purge=false&comment=purge=true',
    '?comment=purge%3Dtrue']) {
    const r = await node.control('DELETE', `/v1/workers/strict${query}`);
    assert.equal(r.status, 200, `${query}: ${r.text}`);
    assert.deepEqual(r.json, { deleted: 'strict', facet_purged: false });
    assert.ok(existsSync(file), `${query}: the facet is kept`);
    await deployWithRow();
  }
  // purged: purge=true, also percent-encoded and next to other parameters
  for (const query of ['?purge=true', '?comment=x&p%75rge=%74rue#frag']) {
    const r = await node.control('DELETE', `/v1/workers/strict${query}`);
    assert.equal(r.status, 200, `${query}: ${r.text}`);
    assert.deepEqual(r.json, { deleted: 'strict', facet_purged: true });
    assert.equal(existsSync(file), false, `${query}: the facet is gone`);
    await deployWithRow();
  }
});

// Opens its facet, then waits for the client to finish the request body
// before it writes: the test deletes the worker in between.
const INFLIGHT = `export default {
  async fetch(request, env) {
    env.DB.exec('SELECT 1');
    if (request.method !== 'POST') {
      return Response.json(env.DB.exec("SELECT name FROM sqlite_schema WHERE type = 'table'").raw().toArray());
    }
    await request.text();
    try {
      env.DB.exec("CREATE TABLE IF NOT EXISTS late (v); INSERT INTO late VALUES ('after purge')");
      return new Response('wrote');
    } catch (err) {
      return new Response(err.message);
    }
  },
};`;

test('a request still running when its worker is purged does not bring the facet back', async () => {
  await deployOk('inflight', INFLIGHT);
  const file = path.join(node.dataDir, 'facets', 'inflight.sqlite');
  const conn = await new RawConn(node.listenPort).connect();
  try {
    const response = conn.request('POST /hold HTTP/1.1\r\nHost: inflight.localhost\r\n' +
      'Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n');
    // -wal: the facet is open and configured (the file alone appears before that)
    await waitFor(() => existsSync(`${file}-wal`), { what: 'the facet opened by the running request' });
    const r = await node.control('DELETE', '/v1/workers/inflight?purge=true');
    assert.equal(r.status, 200, r.text);
    assert.equal(existsSync(file), false);
    conn.write('0\r\n\r\n');
    const res = await response;
    assert.equal(res.status, 200, res.text);
    // refused, or (the process not yet told) written to the deleted file
    assert.match(res.body.toString(), /^(wrote|the worker was deleted and its facet purged)$/);
  } finally {
    conn.close();
  }
  assert.equal(existsSync(file), false, 'the purged facet stays gone');
  await deployOk('inflight', INFLIGHT);
  const r = await node.ingress('inflight', '/');
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, [], 'a new deploy starts from an empty facet');
});

test('durability: every acknowledged write survives SIGKILL of worker processes', async (t) => {
  const dataDir = tempDir('edgenode-facet-durable-');
  const ROUNDS = 12;
  const BATCH = 5;
  const acked = new Set();
  let next = 0;
  let nextBatch = 0;
  let kills = 0;
  let local = await startNode({ workers: 2, dataDir });
  try {
    await local.deployOk('durable', { 'index.js': COUNTER }, { bindings: DB });
    for (let round = 0; round < ROUNDS; round++) {
      if (round > 0) local = await startNode({ workers: 2, dataDir });
      local.allowCrashes = true;
      const target = local;
      let stop = false;
      const ackedBefore = acked.size;
      // three clients write single rows, one writes batches of BATCH rows
      // in a transaction (numbers from 10^6 up, BATCH apart)
      const clients = Array.from({ length: 4 }, async (_, id) => {
        while (!stop) {
          try {
            if (id === 3) {
              const from = 1e6 + BATCH * nextBatch++;
              const r = await target.ingress('durable', `/batch?from=${from}&k=${BATCH}`,
                { method: 'POST', timeout: 3000 });
              if (r.status === 200) for (let i = 0; i < BATCH; i++) acked.add(from + i);
            } else {
              const n = next++;
              const r = await target.ingress('durable', `/write?n=${n}`, { method: 'POST', timeout: 3000 });
              if (r.status === 200 && r.text === `ok ${n}`) acked.add(n);
            }
          } catch {
            // the process died under this request: not acknowledged
          }
        }
      });
      // writes are flowing (the isolate is loaded, the facet open) ...
      await waitFor(() => acked.size > ackedBefore, { timeout: 10000, what: 'a first write' });
      // ... when one worker process dies at a random moment while the other serves ...
      await sleep(100 + Math.random() * 400);
      const pids = await target.workerPids();
      process.kill(pids[Math.floor(Math.random() * pids.length)], 'SIGKILL');
      kills++;
      // ... then the whole node, workers and supervisor, at once
      await sleep(50 + Math.random() * 300);
      await target.kill();
      kills += pids.length;
      stop = true;
      await Promise.all(clients);
    }
  } finally {
    await local.kill();
  }
  assert.ok(kills >= 3 * ROUNDS);
  assert.ok(acked.size >= ROUNDS * 5, `only ${acked.size} writes were acknowledged`);
  const file = path.join(dataDir, 'facets', 'durable.sqlite');
  if (!hasSqlite) return;
  assert.deepEqual(sqlite(file, 'PRAGMA integrity_check'), ['ok']);
  const present = new Set(sqlite(file, 'SELECT n FROM rows').map(Number));
  const lost = [...acked].filter((n) => !present.has(n));
  // a transaction is all or nothing, acknowledged or not
  for (let b = 0; b < nextBatch; b++) {
    const rows = Array.from({ length: BATCH }, (_, i) => present.has(1e6 + BATCH * b + i));
    assert.ok(rows.every((x) => x === rows[0]), `batch ${b} is partly there: ${rows}`);
  }
  t.diagnostic(`${kills} processes killed, ${acked.size} writes acknowledged, ` +
               `${present.size} rows in the file`);
  assert.deepEqual(lost, [], `${lost.length} of ${acked.size} acknowledged rows are missing`);
});

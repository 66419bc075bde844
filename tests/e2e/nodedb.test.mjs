// node.db as an operator meets it: a data directory written before node.db
// kept a schema version opens and goes on working, and a deploy is one
// transaction: when storing its egress rules fails, the previous version and
// its rules stay as they were.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, test } from 'node:test';
import { missingInput, startNode, tempDir } from './lib/node.mjs';

const hasSqlite = spawnSync('sqlite3', ['-version'], { encoding: 'utf8' }).status === 0;

function sqlite(file, sql) {
  const r = spawnSync('sqlite3', ['-batch', '-cmd', '.timeout 5000', file], { input: sql, encoding: 'utf8', timeout: 60000 });
  if (r.status !== 0) throw new Error(`sqlite3 ${file}: ${r.stderr}`);
  return r.stdout.trim();
}

const nodes = [];
after(async () => {
  for (const n of nodes) await n.stop({ clean: true });
});

// The tables as the edgenode before schema versions made them, with one worker.
const V0 = `
PRAGMA journal_mode=WAL;
CREATE TABLE workers (  name TEXT PRIMARY KEY,  version INTEGER NOT NULL,  main_module TEXT NOT NULL,  modules TEXT NOT NULL,  bindings TEXT NOT NULL,  limits TEXT NOT NULL,  created_at INTEGER NOT NULL,  updated_at INTEGER NOT NULL);
INSERT INTO workers VALUES('hello',2,'index.js','{"index.js":"export default { fetch() { return new Response(\\"from before\\") } }"}','{}','{"cpu_ms":50,"memory_mb":128,"wall_ms":30000}',1796163839266,1796163839355);
CREATE TABLE worker_versions (  name TEXT PRIMARY KEY,  last INTEGER NOT NULL);
INSERT INTO worker_versions VALUES('hello',2);
CREATE TABLE events (  id INTEGER PRIMARY KEY,  time INTEGER NOT NULL,  kind TEXT NOT NULL,  tenant TEXT,  details TEXT NOT NULL);
INSERT INTO events VALUES(1,1796163839276,'deploy','hello','{"version":1,"created":true}');
CREATE TABLE cordons (  name TEXT PRIMARY KEY,  state TEXT NOT NULL,  reason TEXT NOT NULL,  rule TEXT,  by TEXT NOT NULL,  since INTEGER NOT NULL);
CREATE TABLE egress_rules (  name TEXT PRIMARY KEY,  rules TEXT NOT NULL,  updated_at INTEGER NOT NULL);
INSERT INTO egress_rules VALUES('hello','[{"match":"https://api.example.com/v2/*","methods":["GET"]}]',1796163839356);
`;

test('a node.db from before schema versions opens, migrates and goes on working', async (t) => {
  if (!hasSqlite) return missingInput(t, 'the sqlite3 command-line tool is missing', 'deploy/setup.sh installs it');
  const dir = tempDir();
  const db = path.join(dir, 'node.db');
  sqlite(db, V0);
  const node = await startNode({ workers: 1, dataDir: dir });
  nodes.push(node);

  const w = await node.control('GET', '/v1/workers/hello');
  assert.equal(w.status, 200, w.text);
  assert.equal(w.json.version, 2);
  const res = await node.ingress('hello', '/');
  assert.equal(res.text, 'from before');
  const rules = await node.control('GET', '/v1/workers/hello/egress');
  assert.deepEqual(rules.json.rules, [{ match: 'https://api.example.com/v2/*', methods: ['GET'] }]);
  const events = await node.control('GET', '/v1/events?kind=deploy');
  assert.ok(events.json.events.some((e) => e.id === 1 && e.tenant === 'hello'), events.text);

  const r = await node.deploy('hello', 'export default { fetch() { return new Response("after") } }');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.version, 3);
  assert.equal((await node.ingress('hello', '/')).text, 'after');
  assert.equal(sqlite(db, 'PRAGMA user_version;'), '4');
  // schema 3: the worker deployed before it starts its history with its current version
  const v = await node.control('GET', '/v1/workers/hello/versions');
  assert.deepEqual(v.json.versions.map((x) => x.version), [3, 2]);
  // schema 2: secrets set before it have no grants (granted to no worker)
  assert.equal(sqlite(db, 'SELECT count(*) FROM secrets;'), '0');
});

test('a deploy whose egress rules cannot be stored changes nothing', async (t) => {
  if (!hasSqlite) return missingInput(t, 'the sqlite3 command-line tool is missing', 'deploy/setup.sh installs it');
  const node = await startNode({ workers: 1 });
  nodes.push(node);
  const db = path.join(node.dataDir, 'node.db');
  const code = (text) => ({
    modules: { 'index.js': `export default { fetch() { return new Response(${JSON.stringify(text)}) } }` },
  });
  const put = (body) => node.control('PUT', '/v1/workers/app', {
    body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' },
  });
  const v1Rules = [{ match: 'https://api.example.com/v1/*' }];
  const first = await put({ ...code('v1'), egress: v1Rules });
  assert.equal(first.status, 201, first.text);

  // As a full disk would, but only for the egress rules: the worker row of
  // the same deploy is written first, in the same transaction.
  sqlite(db, "CREATE TRIGGER refuse BEFORE INSERT ON egress_rules BEGIN SELECT RAISE(ABORT, 'no room'); END;");
  const failed = await put({ ...code('v2'), egress: [{ match: 'https://api.example.com/v2/*' }] });
  assert.equal(failed.status, 500, failed.text);
  assert.equal(failed.json.error, 'registry write failed');
  const w = await node.control('GET', '/v1/workers/app');
  assert.equal(w.json.version, 1, w.text);
  assert.equal((await node.ingress('app', '/')).text, 'v1');
  const rules = await node.control('GET', '/v1/workers/app/egress');
  assert.deepEqual(rules.json.rules, v1Rules);

  sqlite(db, 'DROP TRIGGER refuse;');
  const again = await put({ ...code('v2'), egress: [{ match: 'https://api.example.com/v2/*' }] });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.json.version, 2, 'the failed deploy used up no version');
  assert.equal((await node.ingress('app', '/')).text, 'v2');
});

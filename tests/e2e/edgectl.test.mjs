// edgectl against a running node: every command, --json, failures, README tour.
import assert from 'node:assert/strict';
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { EDGECTL, SOURCE_DIR, runProcess, startNode, tempDir, workerList, writeFile } from './lib/node.mjs';

let node;
let work;

before(async () => {
  node = await startNode({ workers: 2 });
  work = tempDir('edgectl-e2e-');
  writeFile(work, 'hello.js', `export default { fetch() { return new Response('hello via edgectl'); } };\n`);
  writeFile(work, 'index.js', `import { word } from './util.js';\nexport default { fetch() { return new Response(word); } };\n`);
  writeFile(work, 'util.js', `export const word = 'two modules';\n`);
  mkdirSync(path.join(work, 'nested'));
  mkdirSync(path.join(work, 'nested', 'lib'));
  writeFile(work, 'nested/index.js', `import { word } from './lib/util.js';\nexport default { fetch() { return new Response(word); } };\n`);
  writeFile(work, 'nested/lib/util.js', `export const word = 'nested modules';\n`);
  writeFile(work, 'nofetch.js', `export default { hello() {} };\n`);
  writeFile(work, 'broken.js', `export default {\n  fetch() {\n    return new Response("x"));\n  }\n};\n`);
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

function ctl(args, { json = false, token, nodeUrl, cwd = work, input } = {}) {
  const base = ['--node', nodeUrl ?? `http://127.0.0.1:${node.controlPort}`,
    '--token-file', token ?? path.join(node.dataDir, 'control.token')];
  if (json) base.push('--json');
  return runProcess(EDGECTL, [...base, ...args], { cwd, timeout: 15000, input });
}

function ok(r, what) {
  assert.equal(r.code, 0, `${what}: exit ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  return r;
}

function parseJson(r, what) {
  try {
    return JSON.parse(r.stdout);
  } catch {
    assert.fail(`${what}: --json output is not JSON: ${r.stdout}`);
  }
}

test('deploy, then the worker answers', async () => {
  const r = ok(await ctl(['deploy', 'hello', 'hello.js']), 'deploy');
  assert.match(r.stdout, /hello/, `human output names the worker: ${r.stdout}`);
  const res = await node.ingress('hello', '/');
  assert.equal(res.text, 'hello via edgectl');
});

test('deploy several files with --main and limits', async () => {
  ok(await ctl(['deploy', 'multi', 'util.js', 'index.js', '--main', 'index.js',
    '--cpu-ms', '70', '--memory-mb', '96']), 'deploy multi');
  const res = await node.ingress('multi', '/');
  assert.equal(res.status, 200, res.text);
  assert.equal(res.text, 'two modules');
  const show = await node.control('GET', '/v1/workers/multi');
  assert.deepEqual(show.json.limits, { cpu_ms: 70, memory_mb: 96, wall_ms: 30000 });
  assert.equal(show.json.main_module, 'index.js');
});

// Modules are named by their path relative to the main module's directory,
// so relative imports into subdirectories resolve on the node as on disk.
test('deploy files from a subdirectory keeps their relative paths', async () => {
  ok(await ctl(['deploy', 'nested', 'index.js', 'lib/util.js', '--main', 'index.js'],
    { cwd: path.join(work, 'nested') }), 'deploy nested');
  assert.equal((await node.ingress('nested', '/')).text, 'nested modules');
  let show = await node.control('GET', '/v1/workers/nested');
  assert.equal(show.json.main_module, 'index.js');
  assert.deepEqual([...show.json.modules].sort(), ['index.js', 'lib/util.js']);

  // the same files named from elsewhere, the main module first, ./ and .. spelled out
  ok(await ctl(['deploy', 'nested', './nested/index.js', 'nested/./lib/../lib/util.js']),
    'deploy nested from its parent');
  show = await node.control('GET', '/v1/workers/nested');
  assert.equal(show.json.main_module, 'index.js');
  assert.deepEqual([...show.json.modules].sort(), ['index.js', 'lib/util.js']);
  assert.equal((await node.ingress('nested', '/')).text, 'nested modules');

  // --main given only as an option (not among the files) is read too
  ok(await ctl(['deploy', 'nested', 'nested/lib/util.js', '--main', path.join(work, 'nested', 'index.js')]),
    'deploy nested with an absolute --main');
  assert.equal((await node.ingress('nested', '/')).text, 'nested modules');
  ok(await ctl(['delete', 'nested']), 'delete nested'); // the list test counts workers
});

test('deploy refuses a file outside the main module\'s directory', async () => {
  const before = await node.control('GET', '/v1/workers/outside');
  assert.equal(before.status, 404);
  const r = await ctl(['deploy', 'outside', 'index.js', '../util.js'], { cwd: path.join(work, 'nested') });
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /\.\.\/util\.js/, `names the file: ${r.stderr}`);
  assert.match(r.stderr, /outside/, `says why: ${r.stderr}`);
  const main = await ctl(['deploy', 'outside', 'nested/index.js', 'util.js']);
  assert.notEqual(main.code, 0, 'a sibling of the main module\'s directory is outside it too');
  assert.match(main.stderr, /util\.js.*outside/);
  assert.equal((await node.control('GET', '/v1/workers/outside')).status, 404, 'nothing deployed');
  const twice = await ctl(['deploy', 'outside', 'index.js', './index.js'], { cwd: path.join(work, 'nested') });
  assert.notEqual(twice.code, 0, 'the same module twice');
  assert.match(twice.stderr, /index\.js/);
});

test('deploy --json', async () => {
  const r = ok(await ctl(['deploy', 'hello', 'hello.js'], { json: true }), 'deploy --json');
  const j = parseJson(r, 'deploy');
  assert.equal(j.name, 'hello');
  assert.ok(j.version >= 2, `redeploy version: ${r.stdout}`);
});

test('list and list --json', async () => {
  const r = ok(await ctl(['list']), 'list');
  assert.match(r.stdout, /\bhello\b/);
  assert.match(r.stdout, /\bmulti\b/);
  const j = parseJson(ok(await ctl(['list'], { json: true }), 'list --json'), 'list');
  const list = Array.isArray(j) ? j : j.workers;
  assert.deepEqual(list.map((w) => w.name).sort(), ['hello', 'multi']);
});

test('show and show --json', async () => {
  const r = ok(await ctl(['show', 'multi']), 'show');
  assert.match(r.stdout, /multi/);
  assert.match(r.stdout, /index\.js/);
  const j = parseJson(ok(await ctl(['show', 'multi'], { json: true }), 'show --json'), 'show');
  assert.equal(j.name, 'multi');
  assert.equal(j.main_module, 'index.js');
  assert.ok(Number.isInteger(j.version));
});

test('node and node --json', async () => {
  const info = await node.nodeInfo();
  const r = ok(await ctl(['node']), 'node');
  assert.ok(r.stdout.includes(info.version), `version in: ${r.stdout}`);
  const j = parseJson(ok(await ctl(['node'], { json: true }), 'node --json'), 'node');
  assert.equal(j.version, info.version);
  assert.equal(workerList(j).length, 2);
});

test('delete, then show fails with the server message', async () => {
  ok(await ctl(['delete', 'hello']), 'delete');
  assert.equal((await node.ingress('hello', '/')).status, 404);
  const server = await node.control('GET', '/v1/workers/hello');
  assert.equal(server.status, 404);
  const r = await ctl(['show', 'hello']);
  assert.notEqual(r.code, 0, 'show of a deleted worker fails');
  assert.ok(`${r.stderr}${r.stdout}`.includes(server.json.error),
    `prints the server's message ${JSON.stringify(server.json.error)}: ${r.stderr}`);
  const again = await ctl(['delete', 'hello']);
  assert.notEqual(again.code, 0, 'delete of an unknown worker fails');
});

test('a deploy the server refuses: non-zero exit with its message', async () => {
  const r = await ctl(['deploy', 'broken', 'broken.js']);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /SyntaxError/, r.stderr);
  assert.match(r.stderr, /3/, `line number shown: ${r.stderr}`);
  const nofetch = await ctl(['deploy', 'nofetch', 'nofetch.js']);
  assert.notEqual(nofetch.code, 0);
  const server = await node.deploy('nofetch', { 'nofetch.js': `export default { hello() {} };\n` });
  assert.equal(server.status, 400);
  assert.ok(nofetch.stderr.includes(server.json.error),
    `server message ${JSON.stringify(server.json.error)} in ${nofetch.stderr}`);
  // edgectl may check a name itself; either way it fails and says which name
  const bad = await ctl(['deploy', 'Bad_Name', 'hello.js']);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /Bad_Name|invalid worker name/);
});

test('wrong token, unreachable node, missing file, usage errors: non-zero exit', async () => {
  const tokenFile = writeFile(work, 'wrong.token', 'wrong-token\n');
  const r = await ctl(['list'], { token: tokenFile });
  assert.notEqual(r.code, 0);
  const server = await node.control('GET', '/v1/workers', { token: 'wrong-token' });
  assert.equal(server.status, 401);
  assert.ok(r.stderr.includes(server.json.error), `server message ${JSON.stringify(server.json.error)} in ${r.stderr}`);

  const down = await ctl(['list'], { nodeUrl: 'http://127.0.0.1:1' });
  assert.notEqual(down.code, 0);
  assert.ok(down.stderr.length > 0, 'says why');

  const nofile = await ctl(['deploy', 'x', 'does-not-exist.js']);
  assert.notEqual(nofile.code, 0);
  assert.match(nofile.stderr, /does-not-exist\.js/);

  // a malformed --node is a usage error (2), never a failed lookup (1)
  for (const nodeUrl of ['http://[::1', 'http://[::1]x', 'http://[zz]:80', 'http://[]:80', 'http://a]b:80',
    'ftp://x', 'http://', 'http://:80']) {
    const bad = await ctl(['list'], { nodeUrl });
    assert.equal(bad.code, 2, `--node ${nodeUrl}: ${bad.stderr}`);
    assert.match(bad.stderr, /--node/, `--node ${nodeUrl}`);
    assert.doesNotMatch(bad.stderr, /cannot resolve/, `--node ${nodeUrl}`);
  }

  for (const args of [[], ['frobnicate'], ['deploy'], ['deploy', 'x'], ['show']]) {
    const u = await ctl(args);
    assert.notEqual(u.code, 0, `edgectl ${args.join(' ')}`);
    assert.ok(u.stderr.length > 0, `edgectl ${args.join(' ')} says why`);
  }
});

test('README tour: edgectl deploy api ./examples/api.js, then /items?id=3', async () => {
  ok(await ctl(['deploy', 'api', './examples/api.js'], { cwd: SOURCE_DIR }), 'deploy api');
  ok(await ctl(['deploy', 'api', 'examples/api.js'], { cwd: SOURCE_DIR }), 'deploy api');
  assert.equal((await node.control('GET', '/v1/workers/api')).json.main_module, 'api.js');
  const res = await node.ingress('api', '/items?id=3');
  assert.equal(res.status, 200, res.text);
  assert.ok(res.json, `JSON: ${res.text}`);
  ok(await ctl(['deploy', 'hello', './examples/hello.js'], { cwd: SOURCE_DIR }), 'deploy hello');
  const hello = await node.ingress('hello', '/');
  assert.equal(hello.status, 200);
});

test('secret set reads the value from stdin; list shows names only; delete removes it', async () => {
  const value = 'do-not-print-this-value';
  const set = ok(await ctl(['secret', 'set', 'EDGECTL_TOKEN'], { input: `${value}\n` }), 'secret set');
  assert.doesNotMatch(set.stdout + set.stderr, new RegExp(value));
  const table = ok(await ctl(['secret', 'list']), 'secret list');
  assert.match(table.stdout, /^NAME\s+UPDATED\s+WORKERS\nEDGECTL_TOKEN\s+\d{4}-\d\d-\d\dT[\d:.]+Z\s+-\n$/, table.stdout);
  // --worker grants it to exactly those workers; grant and revoke change one
  ok(await ctl(['secret', 'set', 'EDGECTL_TOKEN', '--worker', 'shop', '--worker', 'blog'], { input: value }), 'secret set --worker');
  assert.match(ok(await ctl(['secret', 'list']), 'secret list').stdout, /EDGECTL_TOKEN\s+\S+\s+shop, blog\n$/);
  assert.equal(ok(await ctl(['secret', 'revoke', 'EDGECTL_TOKEN', 'blog']), 'secret revoke').stdout,
    'secret EDGECTL_TOKEN revoked from blog\n');
  assert.equal(ok(await ctl(['secret', 'grant', 'EDGECTL_TOKEN', 'api']), 'secret grant').stdout,
    'secret EDGECTL_TOKEN granted to api\n');
  const granted = parseJson(ok(await ctl(['secret', 'list'], { json: true }), 'secret list --json'), 'secret list');
  assert.deepEqual(granted.secrets[0].workers, ['shop', 'api']);
  const badWorker = await ctl(['secret', 'grant', 'EDGECTL_TOKEN', 'Bad_Name']);
  assert.equal(badWorker.code, 2, badWorker.stderr);
  assert.match(badWorker.stderr, /invalid worker name 'Bad_Name'/);
  const misplaced = await ctl(['secret', 'delete', 'EDGECTL_TOKEN', '--worker', 'shop']);
  assert.equal(misplaced.code, 2);
  assert.match(misplaced.stderr, /--worker is for 'secret set'/);
  const list = parseJson(ok(await ctl(['secret', 'list'], { json: true }), 'secret list --json'), 'secret list');
  assert.deepEqual(list.secrets.map((s) => s.name), ['EDGECTL_TOKEN']);
  assert.doesNotMatch(JSON.stringify(list) + table.stdout, new RegExp(value));
  ok(await ctl(['secret', 'delete', 'EDGECTL_TOKEN']), 'secret delete');
  assert.equal(ok(await ctl(['secret', 'list']), 'secret list').stdout, 'no secrets\n');
  const again = parseJson(ok(await ctl(['secret', 'list'], { json: true }), 'secret list --json'), 'secret list');
  assert.deepEqual(again.secrets, []);
  const empty = await ctl(['secret', 'set', 'EMPTY'], { input: '' });
  assert.equal(empty.code, 1, empty.stderr);
  assert.match(empty.stderr, /empty/);
  assert.ok(!node.logs.some((l) => l.raw.includes(value)), 'the secret value never reaches a log line');
});

test('facet shows a worker\'s database and facet backup writes a copy', async () => {
  writeFile(work, 'db.js', `export default { fetch(req, env) {
    env.DB.exec('CREATE TABLE IF NOT EXISTS t (v TEXT)');
    env.DB.exec('INSERT INTO t VALUES (?)', 'row');
    return new Response(String(env.DB.exec('SELECT count(*) AS n FROM t').one().n));
  } };\n`);
  const deployed = await node.control('PUT', '/v1/workers/dbw', {
    body: JSON.stringify({ modules: { 'db.js': (await import('node:fs')).readFileSync(path.join(work, 'db.js'), 'utf8') },
      bindings: { DB: { type: 'facet' } } }),
    headers: { 'Content-Type': 'application/json' },
  });
  assert.ok(deployed.status < 300, deployed.text);
  assert.equal((await node.ingress('dbw', '/')).text, '1');
  const human = ok(await ctl(['facet', 'dbw']), 'facet');
  assert.match(human.stdout, /^worker:\s+dbw$/m);
  assert.match(human.stdout, /^tables:\n\s+NAME\s+ROWS\n\s+t\s+1$/m, human.stdout);
  const shown = parseJson(ok(await ctl(['facet', 'dbw'], { json: true }), 'facet --json'), 'facet');
  assert.deepEqual(shown.tables, [{ name: 't', rows: 1 }]);
  const file = path.join(work, 'dbw-backup.sqlite');
  const r = ok(await ctl(['facet', 'backup', 'dbw', file]), 'facet backup');
  assert.match(r.stdout, /written/);
  const rj = parseJson(ok(await ctl(['facet', 'backup', 'dbw', file], { json: true }), 'facet backup --json'), 'backup');
  assert.equal(rj.worker, 'dbw');
  assert.equal(rj.file, file);
  assert.ok(rj.bytes >= 4096, JSON.stringify(rj));
  const head = (await import('node:fs')).readFileSync(file).subarray(0, 16).toString('latin1');
  assert.equal(head, 'SQLite format 3\0');
  const missing = await ctl(['facet', 'backup', 'hello', path.join(work, 'none.sqlite')]);
  assert.equal(missing.code, 1);
  assert.match(missing.stderr, /no facet/);
});

test('help for each command: edgectl help NAME and NAME --help', async () => {
  const overview = ok(await ctl(['help']), 'help');
  for (const c of ['deploy', 'list', 'show', 'delete', 'run', 'node', 'tenants', 'tenant', 'cordon', 'uncordon',
    'drain', 'events', 'top', 'secret', 'facet', 'egress']) {
    assert.match(overview.stdout, new RegExp(`^  ${c}\\s+\\S`, 'm'), `the overview lists ${c}`);
    const h = ok(await ctl(['help', c]), `help ${c}`);
    assert.match(h.stdout, new RegExp(`^usage: edgectl ${c}\\b`), h.stdout);
    assert.doesNotMatch(h.stdout, /^commands:/m, `help ${c} is that command's only`);
    assert.equal(ok(await ctl([c, '--help']), `${c} --help`).stdout, h.stdout);
  }
  const deploy = ok(await ctl(['help', 'deploy']), 'help deploy');
  for (const opt of ['--main', '--cpu-ms', '--memory-mb', '--spec', '--replace', '--config', '--dry-run', '--var',
    '--facet', '--egress', '--allow', 'edgenode.json']) assert.ok(deploy.stdout.includes(opt), opt);
  const unknown = await ctl(['help', 'frobnicate']);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /unknown command 'frobnicate'/);
});

test('a usage error prints one line and where to read more, not the whole help', async () => {
  for (const [args, cmd, why] of [[['deploy'], 'deploy', /missing operand/], [['show', 'a', 'b'], 'show', /unexpected operand 'b'/],
    [['list', '--input', '{}'], 'list', /list does not take --input/], [['uncordon', 'a', '--reason', 'x'], 'uncordon', /--reason/],
    [['events', '--limit', 'zero'], 'events', /positive integer/]]) {
    const r = await ctl(args);
    assert.equal(r.code, 2, `edgectl ${args.join(' ')}: ${r.stderr}`);
    const lines = r.stderr.trimEnd().split('\n');
    assert.equal(lines.length, 2, `one line and the pointer: ${r.stderr}`);
    assert.match(lines[0], why, r.stderr);
    assert.equal(lines[1], `see 'edgectl help ${cmd}'`);
    assert.equal(r.stdout, '');
  }
  const none = await ctl([]);
  assert.equal(none.code, 2);
  assert.deepEqual(none.stderr.trimEnd().split('\n'), ['edgectl: no command given', "see 'edgectl help'"]);
  const unknown = await ctl(['frobnicate']);
  assert.deepEqual(unknown.stderr.trimEnd().split('\n'), ["edgectl: unknown command 'frobnicate'", "see 'edgectl help'"]);
});

test('deploy over a worker with bindings refuses unless --spec gives them or --replace', async () => {
  const code = `export default { fetch(req, env) {
    const n = env.DB ? env.DB.exec('SELECT 1 AS n').one().n : 'no DB';
    return new Response(String(env.GREETING ?? 'no greeting') + ' ' + n);
  } };\n`;
  writeFile(work, 'bound.js', code);
  const put = await node.control('PUT', '/v1/workers/bound', {
    body: JSON.stringify({ modules: { 'bound.js': code }, bindings: { DB: { type: 'facet' }, GREETING: { type: 'text', value: 'hi' } } }),
    headers: { 'Content-Type': 'application/json' },
  });
  assert.equal(put.status, 201, put.text);
  assert.equal((await node.ingress('bound', '/')).text, 'hi 1');

  const refused = await ctl(['deploy', 'bound', 'bound.js']);
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /worker bound has bindings \(DB, GREETING\)/);
  assert.match(refused.stderr, /--spec/);
  assert.match(refused.stderr, /--replace/);
  assert.equal((await node.control('GET', '/v1/workers/bound')).json.version, 1, 'nothing deployed');
  assert.equal((await node.ingress('bound', '/')).text, 'hi 1');

  // --spec gives bindings, limits and egress rules; --cpu-ms overrides the spec's
  const spec = writeFile(work, 'bound.spec.json', JSON.stringify({
    bindings: { DB: { type: 'facet' }, GREETING: { type: 'text', value: 'hello' } },
    limits: { cpu_ms: 40, wall_ms: 5000 },
    egress: [{ match: 'https://api.example.com/v1/', methods: ['GET'] }],
  }));
  ok(await ctl(['deploy', 'bound', 'bound.js', '--spec', spec, '--cpu-ms', '30']), 'deploy --spec');
  const shown = (await node.control('GET', '/v1/workers/bound')).json;
  assert.equal(shown.version, 2);
  assert.deepEqual(Object.keys(shown.bindings).sort(), ['DB', 'GREETING']);
  assert.equal(shown.limits.cpu_ms, 30);
  assert.equal(shown.limits.wall_ms, 5000);
  const egress = (await node.control('GET', '/v1/workers/bound/egress')).json;
  assert.deepEqual(egress.rules.map((r) => r.match), ['https://api.example.com/v1/']);
  assert.equal((await node.ingress('bound', '/')).text, 'hello 1');
  const show = ok(await ctl(['show', 'bound']), 'show bound');
  assert.match(show.stdout, /^bindings:\n\s+NAME\s+TYPE\s+VALUE\n\s+DB\s+facet\s+-\n\s+GREETING\s+text\s+hello$/m, show.stdout);

  // --replace deploys without them, as asked
  ok(await ctl(['deploy', 'bound', 'bound.js', '--replace']), 'deploy --replace');
  assert.deepEqual((await node.control('GET', '/v1/workers/bound')).json.bindings, {});
  assert.equal((await node.ingress('bound', '/')).text, 'no greeting no DB');
  // now it has none: a plain deploy goes through
  ok(await ctl(['deploy', 'bound', 'bound.js']), 'deploy without bindings');
  ok(await ctl(['delete', 'bound']), 'delete bound');
});

test('deploy --spec with the modules is the whole deploy', async () => {
  const spec = writeFile(work, 'whole.spec.json', JSON.stringify({
    main_module: 'main.js',
    modules: { 'main.js': `import { w } from './w.js';\nexport default { fetch(req, env) { return new Response(w + env.X); } };\n`,
      'w.js': `export const w = 'whole ';\n` },
    bindings: { X: { type: 'json', value: 1 } },
  }));
  const r = ok(await ctl(['deploy', 'whole', '--spec', spec], { json: true }), 'deploy a whole spec');
  assert.equal(parseJson(r, 'deploy').name, 'whole');
  assert.equal((await node.ingress('whole', '/')).text, 'whole 1');

  const both = await ctl(['deploy', 'whole', 'hello.js', '--spec', spec]);
  assert.equal(both.code, 2, both.stderr);
  assert.match(both.stderr, /no FILEs/);
  const none = await ctl(['deploy', 'whole']);
  assert.equal(none.code, 2);
  const bad = writeFile(work, 'bad.spec.json', '{"bindings": ');
  const badR = await ctl(['deploy', 'whole', 'hello.js', '--spec', bad]);
  assert.equal(badR.code, 1);
  assert.match(badR.stderr, /bad\.spec\.json:1:/);
  const arr = writeFile(work, 'arr.spec.json', '[]');
  assert.match((await ctl(['deploy', 'whole', 'hello.js', '--spec', arr])).stderr, /a spec is a JSON object/);
  // the node's own refusal of a spec comes back as it is
  const unknown = writeFile(work, 'unknown.spec.json', '{"bogus": 1, "bindings": {"X": {"type": "json", "value": 1}}}');
  const u = await ctl(['deploy', 'whole', 'hello.js', '--spec', unknown]);
  assert.equal(u.code, 1);
  assert.match(u.stderr, /unknown key "bogus".*\(HTTP 400\)/);
  ok(await ctl(['delete', 'whole']), 'delete whole');
});

test('egress NAME, egress set NAME FILE, egress clear NAME', async () => {
  ok(await ctl(['deploy', 'out', 'hello.js']), 'deploy out');
  assert.match(ok(await ctl(['egress', 'out']), 'egress').stdout, /^no egress rules/);
  ok(await ctl(['secret', 'grant', 'EXAMPLE_TOKEN', 'out']), 'secret grant');
  const rules = writeFile(work, 'out.egress.json', JSON.stringify([
    { match: 'https://api.example.com/v1/', methods: ['GET', 'POST'],
      inject: { headers: { Authorization: 'Bearer ${secret:EXAMPLE_TOKEN}' } } },
    { match: 'https://*.example.org' },
  ]));
  assert.equal(ok(await ctl(['egress', 'set', 'out', rules]), 'egress set').stdout, 'egress rules of out set (2 rules)\n');
  const shown = ok(await ctl(['egress', 'out']), 'egress');
  const lines = shown.stdout.trimEnd().split('\n');
  assert.match(lines[0], /^MATCH\s+METHODS\s+INJECT$/);
  assert.match(lines[1], /^https:\/\/api\.example\.com\/v1\/\s+GET,POST\s+Authorization$/);
  assert.match(lines[2], /^https:\/\/\*\.example\.org\s+\*\s+-$/);
  assert.doesNotMatch(shown.stdout, /secret:/, 'injected values are not shown');
  const j = parseJson(ok(await ctl(['egress', 'out'], { json: true }), 'egress --json'), 'egress');
  assert.equal(j.rules.length, 2);
  const bad = writeFile(work, 'bad.egress.json', '[{"match":"ftp://x"}]');
  const refused = await ctl(['egress', 'set', 'out', bad]);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /scheme must be http or https \(HTTP 400\)/);
  ok(await ctl(['egress', 'clear', 'out']), 'egress clear');
  assert.deepEqual((await node.control('GET', '/v1/workers/out/egress')).json.rules, []);
  assert.equal((await ctl(['egress', 'set', 'out'])).code, 2);
  ok(await ctl(['delete', 'out']), 'delete out');
});

// A project folder: edgenode.json in wrangler's shape (name, main, rules
// with find_additional_modules, vars, d1_databases, limits) plus egress.
const PROJECT = path.join(SOURCE_DIR, 'tests', 'e2e', 'fixtures', 'edgectl-project');

test('deploy --dry-run prints the spec from edgenode.json and sends nothing', async () => {
  const r = ok(await ctl(['deploy', '--dry-run'], { cwd: PROJECT }), 'deploy --dry-run');
  const spec = parseJson(r, 'dry run');
  assert.equal(spec.main_module, 'index.js');
  assert.deepEqual(Object.keys(spec.modules).sort(), ['index.js', 'lib/shout.js'], 'main and the globs, not unused.js or notes/');
  assert.equal(spec.modules['lib/shout.js'], readFileSync(path.join(PROJECT, 'src', 'lib', 'shout.js'), 'utf8'));
  assert.deepEqual(spec.bindings, {
    GREETING: { type: 'text', value: 'hello' },
    CONF: { type: 'json', value: { region: 'eu' } },
    DB: { type: 'facet' },
  });
  assert.deepEqual(spec.limits, { cpu_ms: 40, wall_ms: 5000 });
  assert.deepEqual(spec.egress, [{ match: 'https://api.example.com/v1/', methods: ['GET'] }]);
  assert.match(r.stderr, /dry run: the spec of PUT \/v1\/workers\/project, not sent/);
  assert.equal((await node.control('GET', '/v1/workers/project')).status, 404, 'nothing deployed');

  // the flags go over the config; NAME over its "name"
  const flags = parseJson(ok(await ctl(['deploy', 'other', '--dry-run', '--var', 'GREETING=hey', '--facet', 'STORE',
    '--allow', 'https://b.example.com/', '--cpu-ms', '9'], { cwd: PROJECT }), 'dry run with flags'), 'dry run');
  assert.deepEqual(flags.bindings.GREETING, { type: 'text', value: 'hey' });
  assert.deepEqual(flags.bindings.STORE, { type: 'facet' });
  assert.deepEqual(flags.limits, { cpu_ms: 9, wall_ms: 5000 });
  assert.deepEqual(flags.egress.map((e) => e.match), ['https://api.example.com/v1/', 'https://b.example.com/']);
  // --config names the file from anywhere; --dry-run also works for FILEs
  const elsewhere = parseJson(ok(await ctl(['deploy', '--dry-run', '--config', path.join(PROJECT, 'edgenode.json')]),
    'dry run --config'), 'dry run');
  assert.deepEqual(Object.keys(elsewhere.modules).sort(), ['index.js', 'lib/shout.js']);
  const files = parseJson(ok(await ctl(['deploy', 'f', 'hello.js', '--dry-run', '--var', 'A=1']), 'dry run FILEs'), 'dry run');
  assert.deepEqual(files.bindings, { A: { type: 'text', value: '1' } });
  assert.equal((await node.control('GET', '/v1/workers/f')).status, 404);
});

test('deploy a project folder, then a redeploy that drops its bindings or egress rules needs --replace', async () => {
  ok(await ctl(['deploy'], { cwd: PROJECT }), 'deploy the project');
  const res = await node.ingress('project', '/');
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(JSON.parse(res.text), { greeting: 'HELLO!', region: 'eu', hits: 1 });
  const shown = (await node.control('GET', '/v1/workers/project')).json;
  assert.deepEqual(shown.limits.cpu_ms, 40);
  assert.deepEqual((await node.control('GET', '/v1/workers/project/egress')).json.rules.map((r) => r.match),
    ['https://api.example.com/v1/']);

  // from files, without the bindings: refused, and nothing changes
  const files = ['project', path.join(PROJECT, 'src', 'index.js'), path.join(PROJECT, 'src', 'lib', 'shout.js')];
  const refused = await ctl(['deploy', ...files]);
  assert.equal(refused.code, 1, refused.stderr);
  assert.match(refused.stderr, /worker project has bindings \(GREETING, CONF, DB\) that this deploy would drop/);
  assert.match(refused.stderr, /--replace/);
  // one binding given is not enough: the others are named
  const partial = await ctl(['deploy', ...files, '--facet', 'DB']);
  assert.equal(partial.code, 1);
  assert.match(partial.stderr, /bindings \(GREETING, CONF\)/);
  assert.equal((await node.control('GET', '/v1/workers/project')).json.version, shown.version, 'nothing deployed');

  // egress rules that leave one out: refused as well
  const rules = writeFile(work, 'project.egress.json', JSON.stringify({ rules: [{ match: 'https://b.example.com/' }] }));
  const dropsRule = await ctl(['deploy', '--egress', rules], { cwd: PROJECT });
  assert.equal(dropsRule.code, 1, dropsRule.stderr);
  assert.match(dropsRule.stderr, /worker project has egress rules \(https:\/\/api\.example\.com\/v1\/\) that this deploy would drop/);
  // adding one to those it has is no drop
  ok(await ctl(['deploy', '--allow', 'https://b.example.com/'], { cwd: PROJECT }), 'deploy --allow');
  assert.deepEqual((await node.control('GET', '/v1/workers/project/egress')).json.rules.map((r) => r.match),
    ['https://api.example.com/v1/', 'https://b.example.com/']);
  ok(await ctl(['deploy', '--egress', rules, '--replace'], { cwd: PROJECT }), 'deploy --egress --replace');
  assert.deepEqual((await node.control('GET', '/v1/workers/project/egress')).json.rules.map((r) => r.match),
    ['https://b.example.com/']);

  // --replace: deployed as asked, without the bindings
  const replaced = parseJson(ok(await ctl([...['deploy', ...files], '--replace'], { json: true }), 'deploy --replace'), 'deploy');
  assert.deepEqual(replaced.bindings, {});
  ok(await ctl(['delete', 'project']), 'delete project');
});

test('"modules" globs pick files below base_dir, skipping dot files and node_modules', async () => {
  const dir = path.join(work, 'globbed');
  for (const d of ['app', 'app/lib', 'app/lib/deep', 'app/node_modules', 'app/.cache']) mkdirSync(path.join(dir, d), { recursive: true });
  for (const f of ['app/main.js', 'app/lib/a.js', 'app/lib/deep/b.mjs', 'app/lib/c.txt', 'app/node_modules/dep.js',
    'app/.cache/x.js', 'app/lib/.hidden.js', 'outside.js']) writeFile(dir, f, `export const f = ${JSON.stringify(f)};\n`);
  writeFile(dir, 'edgenode.json', JSON.stringify({ name: 'globbed', main: 'app/main.js', modules: ['**/*.js', 'lib/**/*.mjs'] }));
  const spec = parseJson(ok(await ctl(['deploy', '--dry-run'], { cwd: dir }), 'dry run'), 'dry run');
  assert.deepEqual(Object.keys(spec.modules), ['main.js', 'lib/a.js', 'lib/deep/b.mjs']);
  assert.equal(spec.main_module, 'main.js');
  // base_dir above main: names keep the directory
  writeFile(dir, 'edgenode.json', JSON.stringify({ name: 'globbed', main: 'app/main.js', base_dir: '.', modules: ['app/lib/*.js'] }));
  const based = parseJson(ok(await ctl(['deploy', '--dry-run'], { cwd: dir }), 'dry run base_dir'), 'dry run');
  assert.deepEqual(Object.keys(based.modules), ['app/main.js', 'app/lib/a.js']);
  // wrangler's rules pick files only with find_additional_modules, as in wrangler
  writeFile(dir, 'edgenode.json', JSON.stringify({ name: 'globbed', main: 'app/main.js',
    rules: [{ type: 'ESModule', globs: ['**/*.js'] }] }));
  const rulesOnly = ok(await ctl(['deploy', '--dry-run'], { cwd: dir }), 'dry run rules');
  assert.deepEqual(Object.keys(parseJson(rulesOnly, 'dry run').modules), ['main.js']);
  assert.match(rulesOnly.stderr, /"rules" pick modules only with "find_additional_modules": true/);
  writeFile(dir, 'edgenode.json', JSON.stringify({ name: 'globbed', main: 'outside.js', base_dir: 'app' }));
  const outside = await ctl(['deploy', '--dry-run'], { cwd: dir });
  assert.equal(outside.code, 1);
  assert.match(outside.stderr, /main outside\.js is not below base_dir/);
});

test('a bad project config fails with the file and the reason, and deploys nothing', async () => {
  const dir = path.join(work, 'badproject');
  mkdirSync(dir);
  writeFile(dir, 'index.js', `export default { fetch() { return new Response('x'); } };\n`);
  const cases = [
    ['{"name": "bp", "main": "index.js", "kv_namespaces": []}', /edgenode\.json: "kv_namespaces" has no counterpart in edgenode/],
    ['{"name": "bp", "main": "index.js", "bogus": 1}', /edgenode\.json: unknown key "bogus"/],
    ['{"name": "bp"}', /edgenode\.json: "main" .* is required/],
    ['{"name": "bp", "main": "missing.js"}', /missing\.js: No such file/],
    ['{"name": "bp", "main": "index.js", "find_additional_modules": true, "rules": [{"type": "Text", "globs": ["**/*.txt"]}]}',
      /rules\[0\]: type "Text": edgenode deploys ES modules only/],
    ['{"name": "bp", "main": "index.js", "vars": []}', /"vars" must be an object/],
    ['{"name": "bp", "main": "index.js", "d1_databases": [{"database_name": "x"}]}', /d1_databases\[0\] needs "binding"/],
    ['{"name": "bp", "main": "index.js", "routes": [7]}', /routes\[0\] must be a pattern/],
    ['{"name": "bp", "main": ', /edgenode\.json:1:\d+:/],
    ['[]', /a project config is a JSON object/],
  ];
  for (const [text, why] of cases) {
    writeFile(dir, 'edgenode.json', text);
    const r = await ctl(['deploy'], { cwd: dir });
    assert.equal(r.code, 1, `${text}: ${r.stderr}`);
    assert.match(r.stderr, why, text);
  }
  writeFile(dir, 'edgenode.json', '{"main": "index.js"}');
  const noName = await ctl(['deploy'], { cwd: dir });
  assert.equal(noName.code, 2, noName.stderr);
  assert.match(noName.stderr, /no NAME given and edgenode\.json has no "name"/);
  const withMain = await ctl(['deploy', 'bp', '--main', 'index.js'], { cwd: dir });
  assert.equal(withMain.code, 2);
  assert.match(withMain.stderr, /a project has "main"/);
  const badVar = await ctl(['deploy', 'bp', '--var', 'NOVALUE', '--dry-run'], { cwd: dir });
  assert.equal(badVar.code, 2);
  assert.match(badVar.stderr, /--var needs NAME=VALUE, not 'NOVALUE'/);
  const configAndFiles = await ctl(['deploy', 'bp', 'index.js', '--config', 'edgenode.json'], { cwd: dir });
  assert.equal(configAndFiles.code, 2);
  assert.match(configAndFiles.stderr, /--config takes no FILEs/);
  assert.equal((await node.control('GET', '/v1/workers/bp')).status, 404, 'nothing deployed');

  writeFile(dir, 'edgenode.toml', 'name = "bp"\nmain = "index.js"\n');
  const both = await ctl(['deploy'], { cwd: dir });
  assert.equal(both.code, 1);
  assert.match(both.stderr, /both edgenode\.json and edgenode\.toml are here/);
  const specNoName = await ctl(['deploy', '--spec', 'edgenode.json'], { cwd: dir });
  assert.equal(specNoName.code, 2);
  assert.match(specNoName.stderr, /deploy: missing operand NAME/);
  const empty = await ctl(['deploy'], { cwd: path.join(work, 'nested') });
  assert.equal(empty.code, 2);
  assert.match(empty.stderr, /edgenode\.json or edgenode\.toml here/);
});

// The same project as edgenode.toml, in wrangler.toml's shape.
test('deploy a project from edgenode.toml; a TOML error names the line', async () => {
  const dir = path.join(work, 'tomlproject');
  mkdirSync(dir);
  const src = path.join(PROJECT, 'src');
  writeFile(dir, 'edgenode.toml', `# as in wrangler.toml
name = "tomlproject"
main = "${path.join(src, 'index.js')}"
compatibility_date = "2026-01-01"
find_additional_modules = true

[[rules]]
type = "ESModule"
globs = ["lib/**/*.js"]   # lib/shout.js

[vars]
GREETING = "hello"
CONF = { region = "eu" }

[[d1_databases]]
binding = "DB"
database_name = "project-db"

[limits]
cpu_ms = 40
wall_ms = 5_000

[[egress]]
match = "https://api.example.com/v1/"
methods = ["GET"]
inject.headers.Authorization = 'Bearer \${secret:API_TOKEN}'
`);
  const fromToml = parseJson(ok(await ctl(['deploy', '--dry-run'], { cwd: dir }), 'toml dry run'), 'dry run');
  const fromJson = parseJson(ok(await ctl(['deploy', '--dry-run'], { cwd: PROJECT }), 'json dry run'), 'dry run');
  fromJson.egress[0].inject = { headers: { Authorization: 'Bearer ${secret:API_TOKEN}' } };
  assert.deepEqual(fromToml, fromJson, 'edgenode.toml gives the spec of the same edgenode.json');
  ok(await ctl(['secret', 'set', 'API_TOKEN', '--worker', 'tomlproject'], { input: 'token' }), 'secret set');
  ok(await ctl(['deploy'], { cwd: dir }), 'deploy from edgenode.toml');
  ok(await ctl(['secret', 'delete', 'API_TOKEN']), 'secret delete');
  assert.deepEqual(JSON.parse((await node.ingress('tomlproject', '/')).text), { greeting: 'HELLO!', region: 'eu', hits: 1 });
  ok(await ctl(['delete', 'tomlproject']), 'delete tomlproject');

  const bad = path.join(work, 'badtoml');
  mkdirSync(bad);
  writeFile(bad, 'index.js', `export default { fetch() { return new Response('x'); } };\n`);
  for (const [line, why] of [
    ['a = """x"""', /line 3: multi-line strings are not supported/],
    ['a = "x', /line 3: unterminated string/],
    ['name = "again"', /line 3: key 'name' is given twice/],
    ['compatibility_date = 2026-01-01', /line 3: unsupported value '2026-01-01'/],
    ['a 1', /line 3: expected '=' after a key/],
    ['vars = 1\n[vars]', /line 4: \[vars\]: 'vars' is already a value/],
    ['limits = { cpu_ms = 1 } 2', /line 3: unexpected '2' after the value/],
    ['a = "\\q"', /line 3: unknown escape '\\q'/],
    ['routes = [1,', /unterminated array/],
    ['routes = [1 2]', /line 3: expected ',' or '\]' in an array/],
    ['[limits', /line 3: expected '\]' to close the table header/],
    ['limits.cpu_ms = inf', /line 3: unsupported value 'inf'/],
    ['kv_namespaces = []', /"kv_namespaces" has no counterpart/],
  ]) {
    writeFile(bad, 'edgenode.toml', `name = "bt"\nmain = "index.js"\n${line}\n`);
    const r = await ctl(['deploy', '--dry-run'], { cwd: bad });
    assert.equal(r.code, 1, `${line}: ${r.stderr}`);
    assert.match(r.stderr, /^edgectl: edgenode\.toml: /, line);
    assert.match(r.stderr, why, line);
    assert.equal(r.stdout, '');
  }
});

test('a project with routes: the node\'s routes get this worker\'s patterns, or a node without them refuses first', async () => {
  const dir = path.join(work, 'routed');
  mkdirSync(dir);
  writeFile(dir, 'index.js', `export default { fetch() { return new Response('routed'); } };\n`);
  writeFile(dir, 'edgenode.json', JSON.stringify({ name: 'routed', main: 'index.js',
    routes: ['routed.example.com/*', { pattern: 'api.example.com/routed/*', zone_name: 'example.com' }] }));
  const dry = ok(await ctl(['deploy', '--dry-run'], { cwd: dir }), 'dry run');
  assert.match(dry.stderr, /routes \["routed\.example\.com\/\*","api\.example\.com\/routed\/\*"\] to routed/);
  const hasRoutes = (await node.control('GET', '/v1/routes')).status === 200;
  const r = await ctl(['deploy'], { cwd: dir });
  if (!hasRoutes) {
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /this node has no \/v1\/routes/);
    assert.equal((await node.control('GET', '/v1/workers/routed')).status, 404, 'refused before the deploy');
    return;
  }
  ok(r, 'deploy with routes');
  const routes = (await node.control('GET', '/v1/routes')).json.routes.filter((e) => e.worker === 'routed');
  assert.deepEqual(routes.map((e) => e.pattern), ['routed.example.com/*', 'api.example.com/routed/*']);
  ok(await ctl(['delete', 'routed']), 'delete routed');
});

test('versions lists what the node keeps, rollback makes an old version current again', async () => {
  writeFile(work, 'v1.js', `export default { fetch() { return new Response('version one'); } };\n`);
  writeFile(work, 'v2.js', `export default { fetch() { return new Response('version two'); } };\n`);
  ok(await ctl(['deploy', 'vers', 'v1.js']), 'deploy v1');
  ok(await ctl(['deploy', 'vers', 'v2.js', '--replace']), 'deploy v2');
  let r = ok(await ctl(['versions', 'vers']), 'versions');
  assert.match(r.stdout, /vers: current version 2, 20 kept/);
  assert.match(r.stdout, /^VERSION\s+CREATED\s+SIZE\s+HASH/m);
  const j = parseJson(ok(await ctl(['versions', 'vers'], { json: true }), 'versions --json'), 'versions');
  assert.deepEqual(j.versions.map((v) => v.version), [2, 1]);
  r = ok(await ctl(['rollback', 'vers', '1']), 'rollback');
  assert.match(r.stdout, /vers: version 3 is version 1's code again/);
  assert.equal((await node.ingress('vers', '/')).text, 'version one');
  r = ok(await ctl(['versions', 'vers']), 'versions after rollback');
  assert.match(r.stdout, /rollback to 1/);
  // bad input: a usage error, and the node's own refusal
  r = await ctl(['rollback', 'vers', 'latest']);
  assert.equal(r.code, 2, r.stderr);
  assert.match(r.stderr, /VERSION must be a version number/);
  r = await ctl(['rollback', 'vers', '99']);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /HTTP 404/);
});

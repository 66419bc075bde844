// Every example under examples/ deploys and answers; --dev serves hello at once.
import assert from 'node:assert/strict';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { SOURCE_DIR, startNode } from './lib/node.mjs';

const EXAMPLES = path.join(SOURCE_DIR, 'examples');

// examples/<name>.js is a one-module worker; examples/<name>/ a multi-module
// one whose main module is index.js (a folder without one, as
// examples/agent, is not a worker, and tests/e2e/agent.test.mjs runs it).
function examples() {
  const out = [];
  for (const entry of readdirSync(EXAMPLES).sort()) {
    const full = path.join(EXAMPLES, entry);
    const name = entry.replace(/\.m?js$/, '').toLowerCase().replace(/[^a-z0-9-]/g, '-');
    if (statSync(full).isDirectory()) {
      const modules = {};
      const walk = (dir, prefix) => {
        for (const f of readdirSync(dir)) {
          const p = path.join(dir, f);
          if (statSync(p).isDirectory()) walk(p, `${prefix}${f}/`);
          else if (/\.m?js$/.test(f)) modules[`${prefix}${f}`] = readFileSync(p, 'utf8');
        }
      };
      walk(full, '');
      // (a folder without index.js is not a worker: examples/agent is a client program)
      if (modules['index.js'] !== undefined) out.push({ name, modules, main: 'index.js' });
    } else if (/\.m?js$/.test(entry)) {
      out.push({ name, source: readFileSync(full, 'utf8') });
    }
  }
  return out;
}

let node;

before(async () => {
  node = await startNode({ workers: 2 });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

test('the examples hello.js and api.js exist', () => {
  const names = examples().map((e) => e.name);
  assert.ok(names.includes('hello'), `examples: ${names}`);
  assert.ok(names.includes('api'), `examples: ${names}`);
});

for (const ex of examples()) {
  test(`example ${ex.name} deploys and answers`, async () => {
    const r = ex.source !== undefined
      ? await node.deploy(ex.name, ex.source)
      : await node.deploy(ex.name, ex.modules, { main: ex.main });
    assert.ok(r.status === 200 || r.status === 201, `deploy ${ex.name}: ${r.status} ${r.text}`);
    const res = await node.ingress(ex.name, '/');
    assert.ok(res.status < 500, `GET / on ${ex.name}: ${res.status} ${res.text}`);
  });
}

let greeting;

test('hello.js returns its greeting', async () => {
  const res = await node.ingress('hello', '/');
  assert.equal(res.status, 200, res.text);
  assert.match(res.text, /hello/i);
  greeting = res.text;
  // the greeting is what the source says, not something the runtime made up
  const src = readFileSync(path.join(EXAMPLES, 'hello.js'), 'utf8');
  assert.ok(src.includes(res.text.trim().slice(0, 10)), `greeting ${JSON.stringify(res.text)} comes from hello.js`);
});

test('api.js: /items?id=3 returns JSON, an unknown id 404', async () => {
  const res = await node.ingress('api', '/items?id=3');
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers['content-type'] ?? '', /application\/json/);
  assert.ok(res.json, `JSON body: ${res.text}`);
  const item = res.json.item ?? res.json;
  assert.equal(Number(item.id), 3, `item 3: ${res.text}`);

  const missing = await node.ingress('api', '/items?id=999999');
  assert.equal(missing.status, 404, missing.text);
  assert.ok(missing.json, `404 body is JSON: ${missing.text}`);
});

test('--dev serves hello at once', async (t) => {
  const dev = await startNode({ workers: 1, dev: true });
  t.after(() => dev.stop({ clean: true }));
  const res = await dev.ingress('hello', '/');
  assert.equal(res.status, 200, res.text);
  if (greeting !== undefined) assert.equal(res.text, greeting);
  const show = await dev.control('GET', '/v1/workers/hello');
  assert.equal(show.status, 200, show.text);
});

// The client libraries (clients/js, clients/python) against a real node:
// run with input, a response, code errors and limits as typed errors,
// deploy, read back, delete, wrong tokens, an unreachable node, and tail.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { SOURCE_DIR, missingInput, startNode } from './lib/node.mjs';

const {
  Edgenode, AuthError, BadRequestError, CodeError, ConnectionError, LimitError, NotFoundError,
} = await import(pathToFileURL(path.join(SOURCE_DIR, 'clients', 'js', 'edgenode.mjs')).href);

let node;
let client;

before(async () => {
  node = await startNode({ workers: 1 });
  client = new Edgenode({ url: `http://127.0.0.1:${node.controlPort}`, token: node.token });
});

after(async () => {
  if (node) await node.stop();
});

test('js: run with input answers the result, and a fetch handler its response', async () => {
  let a = await client.run({ code: 'export function run(input) { return { doubled: input.n * 2 }; }', input: { n: 21 } });
  assert.deepEqual(a.result, { doubled: 42 });
  a = await client.run({ code: 'export default { fetch(req) { return new Response("hi " + req.method); } };' });
  assert.equal(a.status, 200);
  assert.equal(a.body, 'hi GET');
});

test('js: code errors and limits are typed errors that say where and why', async () => {
  await assert.rejects(client.run({ code: 'export function run( {', input: 1 }), (err) => {
    assert.ok(err instanceof CodeError, err);
    assert.equal(err.status, 400);
    assert.equal(err.kind, 'syntax');
    assert.equal(err.module, 'index.js');
    assert.equal(err.line, 1);
    return true;
  });
  await assert.rejects(client.run({ code: 'export function run() { for (;;) {} }', input: 1, limits: { cpu_ms: 20 } }),
    (err) => err instanceof LimitError && err.kind === 'cpu' && err.status === 503);
  await assert.rejects(client.run({ code: 'export function run() { throw new TypeError("nope"); }', input: 1 }),
    (err) => err instanceof CodeError && err.kind === 'exception' && /nope/.test(err.message));
});

test('js: deploy, read back, list, delete; a bad deploy and a missing worker are typed errors', async () => {
  const d = await client.deploy('jsclient', { code: 'export default { fetch() { return new Response("deployed"); } };' });
  assert.equal(d.version, 1);
  assert.equal((await client.worker('jsclient')).name, 'jsclient');
  assert.ok((await client.workers()).workers.some((w) => w.name === 'jsclient'));
  const served = await node.ingress('jsclient', '/');
  assert.equal(served.text, 'deployed');
  await assert.rejects(client.deploy('jsclient', { code: 'export default {' }),
    (err) => err instanceof CodeError && err.status === 400 && err.line === 1);
  await assert.rejects(client.deploy('jsclient', { code: 'export default {}', limits: { cpu_ms: -1 } }),
    (err) => err instanceof BadRequestError && err.status === 400);
  await client.delete('jsclient');
  await assert.rejects(client.worker('jsclient'), (err) => err instanceof NotFoundError);
  await assert.rejects(client.deploy('x', {}), TypeError);
});

test('js: a wrong token and an unreachable node are typed errors', async () => {
  const wrong = new Edgenode({ url: client.url, token: 'wrong' });
  await assert.rejects(wrong.workers(), (err) => err instanceof AuthError && (err.status === 401 || err.status === 403));
  const away = new Edgenode({ url: 'http://127.0.0.1:1', token: 'x' });
  await assert.rejects(away.workers(), (err) => err instanceof ConnectionError);
});

test('js: tail yields the worker\'s console lines', async () => {
  await client.deploy('jstail', { code: 'export default { fetch() { console.log("from jstail"); return new Response("t"); } };' });
  const ac = new AbortController();
  const seen = [];
  const reading = (async () => {
    for await (const line of client.tail('jstail', { signal: ac.signal })) {
      seen.push(line);
      if (JSON.stringify(line).includes('from jstail')) break;
    }
  })();
  for (let i = 0; i < 100 && !seen.some((l) => JSON.stringify(l).includes('from jstail')); i++) {
    await node.ingress('jstail', '/');
    await new Promise((r) => setTimeout(r, 100));
  }
  ac.abort();
  await reading.catch(() => {});
  assert.ok(seen.some((l) => JSON.stringify(l).includes('from jstail')), JSON.stringify(seen.slice(0, 5)));
});

test('python: the same calls through clients/python', async (t) => {
  const py = spawnSync('python3', ['--version'], { encoding: 'utf8' });
  if (py.status !== 0) {
    missingInput(t, 'python3 is not installed', 'apt-get install python3');
    return;
  }
  const r = spawnSync('python3', [path.join(SOURCE_DIR, 'tests', 'clients', 'python_client_check.py')], {
    encoding: 'utf8',
    timeout: 120000,
    env: {
      ...process.env,
      EDGENODE_URL: `http://127.0.0.1:${node.controlPort}`,
      EDGENODE_TOKEN: node.token,
      EDGENODE_INGRESS: `http://127.0.0.1:${node.listenPort}`,
    },
  });
  assert.equal(r.status, 0, `${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /all passed/);
});

// TypeScript modules: types stripped (amaro, strip-only) in the worker
// process before compiling, positions kept, for deploys, runs and loader
// children; what cannot be stripped is a 400 naming module:line:column.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { EDGECTL, missingInput, runProcess, startNode, tempDir, writeFile } from './lib/node.mjs';

let node;
let noStripper; // why this build has no TypeScript, or undefined

before(async () => {
  node = await startNode({ workers: 2 });
  const probe = await node.control('POST', '/v1/run', { body: { modules: { 'p.ts': 'export function run(): number { return 1; }' } } });
  if (/not supported by this build/.test(probe.json?.error ?? '')) noStripper = probe.json.error;
});

// A test of TypeScript, skipped (failed under EDGENODE_CI=1) by a build without amaro.
function tsTest(name, fn) {
  test(name, async (t) => {
    if (noStripper) return missingInput(t, noStripper, 'run deploy/setup.sh and build again');
    return fn(t);
  });
}

after(async () => {
  if (node) await node.stop({ clean: true });
});

// The 1-based line and column of `needle` in `source`, as V8 counts them.
function where(source, needle) {
  const at = source.indexOf(needle);
  assert.ok(at >= 0, needle);
  const before = source.slice(0, at).split('\n');
  return `${before.length}:${before.at(-1).length + 1}`;
}

const INDEX = `import { greet, type Greeting } from './lib/greet';
import { twice } from './lib/twice.js';
import type { Unused } from './types';

interface Env { WORD: string }
type Answer = { greeting: Greeting; n: number };

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const url: URL = new URL(request.url);
    if (url.pathname === '/throw') {
      try {
        fail<number>(1 as number);
      } catch (err: unknown) {
        return new Response((err as Error).stack);
      }
    }
    const body: Answer = { greeting: greet(env.WORD), n: twice(21) };
    return Response.json(body);
  },
};

function fail<T>(x: T): never {
  const y: T | undefined = x;
  throw new TypeError(\`failed with \${y as unknown as string}\`);
}
`;
const GREET = `export type Greeting = \`hello \${string}\`;
export function greet(word: string): Greeting {
  return \`hello \${word}\` as Greeting;
}
`;
const TWICE = 'export const twice = (n: number): number => n * 2;\n';
const TYPES = 'export interface Unused { a?: number }\n';
const MODULES = { 'index.ts': INDEX, 'lib/greet.ts': GREET, 'lib/twice.ts': TWICE, 'types.ts': TYPES };

tsTest('a typed worker deploys and answers; imports of ./x, ./x.ts and ./x.js find x.ts', async () => {
  const r = await node.deploy('typed', MODULES, { bindings: { WORD: { type: 'text', value: 'ts' } } });
  assert.equal(r.status, 201, r.text);
  assert.deepEqual(r.json.modules, ['index.ts', 'lib/greet.ts', 'lib/twice.ts', 'types.ts']);
  const res = await node.ingress('typed', '/');
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json, { greeting: 'hello ts', n: 42 });
});

tsTest('a thrown error\'s stack names the .ts lines and columns as written', async () => {
  const res = await node.ingress('typed', '/throw');
  assert.equal(res.status, 200, res.text);
  assert.match(res.text, /^TypeError: failed with 1\n/);
  assert.ok(res.text.includes(`at fail (index.ts:${where(INDEX, 'new TypeError')})`), res.text);
  assert.ok(res.text.includes(`(index.ts:${where(INDEX, 'fail<number>')})`), res.text);
  // An uncaught one: the log has the same places.
  const SRC = 'export default {\n  fetch(req: Request): Response {\n    const n: number = 1;\n    throw new RangeError(`n is ${n as number}`);\n  },\n};\n';
  await node.deployOk('typed-throw', { 'main.ts': SRC });
  const r = await node.ingress('typed-throw', '/');
  assert.equal(r.status, 500);
  const line = await node.waitForLog((l) => l.json?.tenant === 'typed-throw' && /uncaught exception/.test(l.json?.msg ?? ''));
  assert.ok(line.json.stack.includes(`(main.ts:${where(SRC, 'new RangeError')})`), line.json.stack);
});

tsTest('enums, namespaces, parameter properties and <T> casts are refused at deploy, naming module:line:column', async () => {
  const cases = [
    ['enum Color { Red, Green }\n', /TypeScript enum is not supported in strip-only mode/, 'src/bad.ts:2:1'],
    ['namespace N { export const a = 1; }\n', /namespace/, 'src/bad.ts:2:1'],
    ['class P { constructor(private x: number) {} }\n', /parameter property/, 'src/bad.ts:2:31'],
    ['const v = <any>globalThis;\n', /angle-bracket/, 'src/bad.ts:2:11'],
  ];
  for (const [code, re, at] of cases) {
    const r = await node.deploy('bad-ts', { 'index.ts': "import './src/bad';\nexport default { fetch() { return new Response('x'); } };\n",
      'src/bad.ts': `// line 1\n${code}` });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error, re);
    assert.ok(r.json.error.endsWith(`(${at})`), r.json.error);
    assert.equal(r.json.kind, 'syntax');
    assert.equal(`${r.json.module}:${r.json.line}:${r.json.column}`, at);
  }
  assert.equal((await node.control('GET', '/v1/workers/bad-ts')).status, 404, 'nothing deployed');
});

tsTest('one module sent as application/typescript is index.ts (so is a /v1/run body)', async () => {
  const src = 'export default { fetch(r: Request): Response { return new Response("raw ts"); } };\n';
  const r = await node.control('PUT', '/v1/workers/raw-ts', { body: src, headers: { 'content-type': 'application/typescript' } });
  assert.equal(r.status, 201, r.text);
  assert.deepEqual(r.json.modules, ['index.ts']);
  assert.equal((await node.ingress('raw-ts', '/')).text, 'raw ts');
  const run = await node.control('POST', '/v1/run', { body: src, headers: { 'content-type': 'text/typescript' } });
  assert.equal(run.status, 200, run.text);
  assert.equal(run.json.body, 'raw ts');
});

tsTest('a TypeScript syntax error is a 400 with its place', async () => {
  const r = await node.deploy('bad-ts', { 'index.ts': 'export default {\n  fetch(): Response { const x: = 1; }\n};\n' });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /^SyntaxError: Unexpected token `=`.* \(index\.ts:2:32\)$/);
  assert.deepEqual([r.json.module, r.json.line, r.json.column], ['index.ts', 2, 32]);
});

tsTest('/v1/run takes .ts modules, and its exception says where in them', async () => {
  const ok = await node.control('POST', '/v1/run', { body: {
    modules: { 'run.ts': 'export function run(input: { a: number }): number { return input.a * 2; }\n' },
    input: { a: 21 } } });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.json.result, 42);
  const SRC = 'function f(): never {\n  throw new RangeError("too far" as string);\n}\nexport default { fetch(): Response { return f(); } };\n';
  const bad = await node.control('POST', '/v1/run', { body: { modules: { 'index.ts': SRC } } });
  assert.equal(bad.status, 500, bad.text);
  assert.equal(`${bad.json.module}:${bad.json.line}:${bad.json.column}`, `index.ts:${where(SRC, 'new RangeError')}`);
  assert.match(bad.json.exception.stack, /at f \(index\.ts:2:9\)/);
  const enumRun = await node.control('POST', '/v1/run', { body: { modules: { 'index.ts': 'enum E { A }\n' } } });
  assert.equal(enumRun.status, 400, enumRun.text);
  assert.match(enumRun.json.error, /enum is not supported.*\(index\.ts:1:1\)/);
});

tsTest('loader children may be TypeScript too', async () => {
  const CHILD = 'export default { fetch(req: Request): Response {\n  const n: number = 2;\n  if (new URL(req.url).pathname === "/throw") throw new Error("child " + (n as number));\n  return new Response(`child ${n}`);\n} };\n';
  const parent = (child) => `export default { async fetch(request: Request, env: { LOADER: any }): Promise<Response> {
  const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'kid.ts',
    modules: { 'kid.ts': ${JSON.stringify(child)} } });
  try {
    const r: Response = await stub.getEntrypoint().fetch('http://kid' + new URL(request.url).pathname);
    return new Response(await r.text());
  } catch (err) {
    return new Response(String((err as Error).stack));
  }
} };
`;
  const LOADER = { LOADER: { type: 'loader' } };
  await node.deployOk('ts-parent', { 'index.ts': parent(CHILD) }, { bindings: LOADER });
  assert.equal((await node.ingress('ts-parent', '/')).text, 'child 2');
  const thrown = await node.ingress('ts-parent', '/throw');
  assert.ok(thrown.text.includes(`(kid.ts:${where(CHILD, 'new Error')})`), thrown.text);
  await node.deployOk('ts-parent2', { 'index.ts': parent('enum E { A }\n') }, { bindings: LOADER });
  const refused = await node.ingress('ts-parent2', '/');
  assert.match(refused.text, /enum is not supported in strip-only mode \(kid\.ts:1:1\)/);
});

tsTest('edgectl deploy of a project with main: "src/index.ts"', async () => {
  const dir = tempDir();
  mkdirSync(path.join(dir, 'src', 'lib'), { recursive: true });
  writeFile(dir, 'edgenode.json', JSON.stringify({ name: 'ts-project', main: 'src/index.ts',
    compatibility_date: '2026-01-01', find_additional_modules: true, vars: { WORD: 'project' } }));
  writeFile(dir, 'src/index.ts', "import { greet } from './lib/greet';\nexport default { fetch(r: Request, env: { WORD: string }): Response { return new Response(greet(env.WORD)); } };\n");
  writeFile(dir, 'src/lib/greet.ts', GREET);
  writeFile(dir, 'src/env.d.ts', 'declare const SOMETHING: string;\n');
  const r = await runProcess(EDGECTL, ['--node', `http://127.0.0.1:${node.controlPort}`,
    '--token-file', path.join(node.dataDir, 'control.token'), 'deploy'], { cwd: dir });
  assert.equal(r.code, 0, r.stderr + r.stdout);
  const shown = await node.control('GET', '/v1/workers/ts-project');
  assert.deepEqual(shown.json.modules.sort(), ['index.ts', 'lib/greet.ts'], 'a .d.ts is not a module');
  assert.equal((await node.ingress('ts-project', '/')).text, 'hello project');
});

tsTest('an idle stripper is let go (--idle-timeout-s), and made again for the next module', async () => {
  const idle = await startNode({ workers: 1, extraArgs: ['--idle-timeout-s', '1'] });
  try {
    const src = (word) => `export default { fetch(): Response { return new Response(${JSON.stringify(word)} as string); } };`;
    await idle.deployOk('first', { 'index.ts': src('first') });
    await idle.waitForLog((l) => /TypeScript stripper let go/.test(l.json?.msg ?? ''), { timeout: 15000, what: 'the stripper let go' });
    await idle.deployOk('second', { 'index.ts': src('second') });
    assert.equal((await idle.ingress('second', '/')).text, 'second');
  } finally {
    await idle.stop({ clean: true });
  }
});

// env.LOADER: dynamic workers in isolates of their own (load() fresh each
// time, get() cached by id), their limits, their errors, and that they go
// away when they should.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { noCordonConfig, sleep, startNode, waitFor, workerList } from './lib/node.mjs';

// One worker process: get() caches per process, and the isolate counts below
// are that process's.
let node;

before(async () => {
  // Children here hit their limits on purpose; the cordon monitor would
  // move the parent out (and drop its cached children) mid-test.
  node = await startNode({ workers: 1, configFile: noCordonConfig() });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

const LOADER = { LOADER: { type: 'loader' } };

// A child whose module-level counter says whether its isolate was reused.
const COUNTER_CHILD = `
let n = 0;
export default {
  async fetch(request, env) {
    n++;
    return new Response(JSON.stringify({ n, url: request.url, env }), {
      headers: { 'content-type': 'application/json', 'x-child': 'yes' },
    });
  },
};`;

// The parent: the route picks what to do with the loader; errors come back
// as {error: {name, message}} so each test can look at them.
const PARENT = `
const counter = ${JSON.stringify(COUNTER_CHILD)};
let getCalls = 0;
function code(extra = {}) {
  return { compatibilityDate: '2025-06-01', mainModule: 'child.js',
           modules: { 'child.js': counter }, ...extra };
}
async function text(stub, input = 'http://child.example/path', init) {
  const res = await stub.getEntrypoint().fetch(input, init);
  return { status: res.status, headers: Object.fromEntries(res.headers), body: await res.text() };
}
const routes = {
  binding(url, env) {
    return { load: typeof env.LOADER?.load, get: typeof env.LOADER?.get };
  },
  async load(url, env) {
    return text(env.LOADER.load(code({ env: { tag: url.searchParams.get('tag') } })));
  },
  async loadTwice(url, env) {
    const stub = env.LOADER.load(code());
    return [await text(stub), await text(stub), await text(env.LOADER.load(code()))];
  },
  async get(url, env) {
    const id = url.searchParams.get('id');
    const stub = env.LOADER.get(id, async () => { getCalls++; return code({ env: { id } }); });
    return { ...(await text(stub)), getCalls };
  },
  async module(url, env) {
    const body = url.searchParams.get('body');
    return text(env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'm.js',
                                  modules: { 'm.js': body } }));
  },
  async getConcurrent(url, env) {
    // Three stubs for one new id, called at once: one start, one getCode().
    const id = url.searchParams.get('id');
    let calls = 0;
    const getCodeSlowly = async () => { calls++; await scheduler.wait(5); return code(); };
    const bodies = await Promise.all([0, 1, 2].map(() => text(env.LOADER.get(id, getCodeSlowly))));
    return { calls, ns: bodies.map((b) => JSON.parse(b.body).n).sort() };
  },
  async getCode(url, env, request) {
    const spec = await request.json();
    return text(env.LOADER.get(spec.id, async () => { getCalls++; return spec.code; }));
  },
  async modules(url, env) {
    return text(env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'src/main.js', modules: {
      'src/main.js': \`import greeting from './greeting.txt'; import conf from './conf.json';
        import { twice } from './lib/util.js'; import raw from './raw.bin';
        export default { fetch() { return Response.json({ greeting, conf, four: twice(2),
          raw: Array.from(new Uint8Array(raw)), proto: Object.getPrototypeOf(conf) === Object.prototype,
          own: Object.keys(conf) }); } };\`,
      'src/lib/util.js': { js: 'export const twice = (x) => 2 * x;' },
      'src/greeting.txt': { text: 'hello "there"\\n' },
      'src/conf.json': { json: JSON.parse('{"a": [1, 2], "__proto__": {"x": 1}, "b": {"c": true}}') },
      'src/raw.bin': { data: new Uint8Array([0, 1, 254, 255]) },
    } }));
  },
  async spec(url, env, request) {
    const spec = await request.json();
    return text(env.LOADER.load(spec.code), spec.url ?? 'http://child.example/', spec.init);
  },
  async echo(url, env) {
    const child = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'e.js', modules: {
      'e.js': \`export default { async fetch(req) {
        const body = new Uint8Array(await req.arrayBuffer());
        const units = (s) => [...(s ?? '')].map((c) => c.charCodeAt(0).toString(16)).join(' ');
        return new Response(body, { status: 201, headers: {
          'x-method': req.method, 'x-seen': req.headers.get('x-test') ?? 'none',
          'x-len': String(body.length), 'x-seen-bytes': units(req.headers.get('x-bytes')),
          'x-back': 'v\\u00ff\\u00e9' } });
      } };\`,
    } });
    const bytes = new Uint8Array(300);
    for (let i = 0; i < bytes.length; i++) bytes[i] = i & 255;
    const res = await child.getEntrypoint().fetch('http://child/echo', {
      method: 'PUT', headers: { 'x-test': 'hello', 'x-bytes': 'v\u00ff\u0080\u00e9' }, body: bytes });
    const back = new Uint8Array(await res.arrayBuffer());
    let same = back.length === bytes.length;
    for (let i = 0; same && i < back.length; i++) same = back[i] === bytes[i];
    const units = (s) => [...(s ?? '')].map((c) => c.charCodeAt(0).toString(16)).join(' ');
    return { status: res.status, method: res.headers.get('x-method'), seen: res.headers.get('x-seen'),
             len: res.headers.get('x-len'), same, seenBytes: res.headers.get('x-seen-bytes'),
             back: units(res.headers.get('x-back')) };
  },
  async bigCode(url, env) {
    const big = 'x'.repeat(64 * 1024 * 1024 + 10);
    env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'a.js',
                      modules: { 'a.js': 'export default {fetch(){return new Response("")}}', 'b.js': '//' + big } });
    return 'loaded';
  },
  async bigEnv(url, env) {
    env.LOADER.load(code({ env: { blob: 'y'.repeat(1024 * 1024 + 1) } }));
    return 'loaded';
  },
};
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const route = routes[url.pathname.slice(1)];
    if (!route) return new Response('no route', { status: 404 });
    try {
      return Response.json({ ok: await route(url, env, request) });
    } catch (err) {
      return Response.json({ error: { name: err.name, message: err.message } });
    }
  },
};`;

async function call(worker, path, opts) {
  const res = await node.ingress(worker, path, opts);
  assert.equal(res.status, 200, `${path}: ${res.status} ${res.text}`);
  return res.json;
}

async function isolates() {
  const info = await node.nodeInfo();
  const [proc] = workerList(info);
  return proc?.isolates;
}

test('deploy a parent with a loader binding: it runs with env.LOADER', async () => {
  // CPU to spare for a parent's cold first request on slow (sanitizer) builds
  const r = await node.deployOk('parent', { 'index.js': PARENT }, { bindings: LOADER, limits: { cpu_ms: 500 } });
  assert.equal(r.status, 201, r.text);
  const seen = await call('parent', '/binding');
  assert.deepEqual(seen.ok, { load: 'function', get: 'function' }, JSON.stringify(seen));
});

test('load(): a fresh isolate every time', async () => {
  for (let i = 0; i < 5; i++) {
    const r = await call('parent', `/load?tag=t${i}`);
    assert.ok(r.ok, JSON.stringify(r));
    const child = JSON.parse(r.ok.body);
    assert.equal(child.n, 1, `load #${i} reused an isolate: ${r.ok.body}`);
    assert.deepEqual(child.env, { tag: `t${i}` });
    assert.equal(child.url, 'http://child.example/path');
    assert.equal(r.ok.headers['x-child'], 'yes');
  }
  // One stub is one isolate for as long as the request runs; two stubs are two.
  const r = await call('parent', '/loadTwice');
  assert.deepEqual(r.ok.map((x) => JSON.parse(x.body).n), [1, 2, 1]);
});

test('load(): children are destroyed after the request', async () => {
  for (let i = 0; i < 20; i++) await call('parent', '/load');
  // The process reports its isolates every second: only the parent stays.
  await waitFor(async () => (await isolates()) === 1,
    { timeout: 5000, what: 'the process to hold only the parent isolate' });
});

test('get(): a cached isolate per id, the callback runs once', async () => {
  const a1 = await call('parent', '/get?id=a');
  const a2 = await call('parent', '/get?id=a');
  const b1 = await call('parent', '/get?id=b');
  const a3 = await call('parent', '/get?id=a');
  const n = (r) => JSON.parse(r.ok.body).n;
  assert.deepEqual([n(a1), n(a2), n(b1), n(a3)], [1, 2, 1, 3]);
  assert.deepEqual(JSON.parse(b1.ok.body).env, { id: 'b' });
  // The callback ran once per id.
  assert.equal(a3.ok.getCalls - a1.ok.getCalls, 1);
});

test('modules: {text}, {json}, {data} and relative imports', async () => {
  const r = await call('parent', '/modules');
  assert.ok(r.ok, JSON.stringify(r));
  const got = JSON.parse(r.ok.body);
  assert.equal(got.greeting, 'hello "there"\n');
  assert.deepEqual(got.conf, JSON.parse('{"a": [1, 2], "__proto__": {"x": 1}, "b": {"c": true}}'));
  // a "__proto__" key in JSON is a key, not the prototype
  assert.deepEqual(got.own, ['a', '__proto__', 'b']);
  assert.equal(got.proto, true);
  assert.equal(got.four, 4);
  assert.deepEqual(got.raw, [0, 1, 254, 255]);
});

test('requests and responses cross intact (method, headers, binary body, status)', async () => {
  const r = await call('parent', '/echo');
  // Header values are bytes, a character each: the same ones both ways, as over HTTP.
  assert.deepEqual(r.ok, { status: 201, method: 'PUT', seen: 'hello', len: '300', same: true,
                           seenBytes: '76 ff 80 e9', back: '76 ff e9' });
});

test('errors thrown in the child surface in the parent, with their class', async () => {
  const thrower = `export default { fetch() { throw new TypeError('child says no'); } };`;
  let r = await call('parent', `/module?body=${encodeURIComponent(thrower)}`);
  assert.deepEqual(r.error, { name: 'TypeError', message: 'child says no' });

  const syntax = `export default { fetch() { return new Response('x')) } };`;
  r = await call('parent', `/module?body=${encodeURIComponent(syntax)}`);
  assert.equal(r.error?.name, 'SyntaxError', JSON.stringify(r));

  const noFetch = `export default { hello() {} };`;
  r = await call('parent', `/module?body=${encodeURIComponent(noFetch)}`);
  assert.equal(r.error?.name, 'TypeError', JSON.stringify(r));
  assert.match(r.error.message, /fetch/);

  const rejects = `export default { async fetch() { await null; throw new RangeError('late'); } };`;
  r = await call('parent', `/module?body=${encodeURIComponent(rejects)}`);
  assert.deepEqual(r.error, { name: 'RangeError', message: 'late' });

  const badReturn = `export default { fetch() { return 'a string'; } };`;
  r = await call('parent', `/module?body=${encodeURIComponent(badReturn)}`);
  assert.ok(r.error, JSON.stringify(r));
});

test('bad code objects are refused at load() (workerd\'s messages)', async () => {
  const spec = (code) => node.ingress('parent', '/spec', { method: 'POST', body: JSON.stringify({ code }) });
  let r = (await spec({ compatibilityDate: '2025-06-01', mainModule: 'a.js', modules: {} })).json;
  assert.match(r.error?.message ?? '', /at least one module/);
  r = (await spec({ compatibilityDate: '2025-06-01', mainModule: 'a.tsx', modules: { 'a.tsx': 'x' } })).json;
  assert.equal(r.error?.name, 'TypeError');
  assert.match(r.error.message, /must end with '\.js'/);
  r = (await spec({ compatibilityDate: '2025-06-01', mainModule: 'a.js',
                    modules: { 'a.js': { js: 'x', text: 'y' } } })).json;
  assert.match(r.error?.message ?? '', /exactly one of/);
  r = (await spec({ compatibilityDate: '2025-06-01', mainModule: 'b.js', modules: { 'a.js': 'x' } })).json;
  assert.match(r.error?.message ?? '', /not one of the modules/);
  r = (await spec({ mainModule: 'a.js', modules: { 'a.js': 'x' } })).json;
  assert.match(r.error?.message ?? '', /compatibilityDate/);
});

test('code over 64 MiB and env over 1 MiB: clear errors', async () => {
  await node.deployOk('bigparent', { 'index.js': PARENT }, { bindings: LOADER, limits: { memory_mb: 512, cpu_ms: 2000 } });
  let r = await call('bigparent', '/bigCode');
  assert.equal(r.error?.name, 'Error', JSON.stringify(r));
  assert.match(r.error.message, /code size .* exceeds the maximum allowed size of 67108864 bytes/);
  r = await call('bigparent', '/bigEnv');
  assert.match(r.error?.message ?? '', /env size \(\d+ bytes\) exceeds the maximum allowed size of 1048576 bytes/);
});

test('globalOutbound: null makes the child\'s fetch() throw', async () => {
  const child = `export default { async fetch() {
    try { await fetch('http://example.com/'); return new Response('fetched'); }
    catch (err) { return new Response(err.name + ': ' + err.message); } } };`;
  const res = await node.ingress('parent', '/spec', {
    method: 'POST',
    body: JSON.stringify({ code: { compatibilityDate: '2025-06-01', mainModule: 'c.js',
                                   modules: { 'c.js': child }, globalOutbound: null } }),
  });
  assert.ok(res.json?.ok, res.text);
  assert.match(res.json.ok.body, /not permitted to access the internet/);
});

test('a child at its CPU limit fails in the parent, which can catch it; others are fine', async () => {
  await node.deployOk('other', `export default { fetch() { return new Response('other ok'); } };`);
  const spin = `export default { fetch() { for (;;) {} } };`;
  const spinning = [];
  for (let i = 0; i < 3; i++) {
    spinning.push(node.ingress('parent', '/spec', {
      method: 'POST',
      body: JSON.stringify({ code: { compatibilityDate: '2025-06-01', mainModule: 'c.js',
                                     modules: { 'c.js': spin }, limits: { cpuMs: 10 } } }),
    }));
  }
  const others = [];
  for (let i = 0; i < 10; i++) {
    const t0 = Date.now();
    others.push(node.ingress('other', '/').then((r) => ({ r, ms: Date.now() - t0 })));
  }
  for (const { r, ms } of await Promise.all(others)) {
    assert.equal(r.status, 200);
    assert.equal(r.text, 'other ok');
    assert.ok(ms < 2000, `the other tenant waited ${ms} ms`);
  }
  for (const res of await Promise.all(spinning)) {
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.error?.name, 'Error', res.text);
    assert.match(res.json.error.message, /CPU time limit \(10 ms\)/);
  }
});

test('a child\'s limits are the lower of its own and its parent\'s', async () => {
  await node.deployOk('tight', { 'index.js': PARENT }, { bindings: LOADER, limits: { cpu_ms: 100 } });
  const res = await node.ingress('tight', '/spec', {
    method: 'POST',
    body: JSON.stringify({ code: { compatibilityDate: '2025-06-01', mainModule: 'c.js',
                                   modules: { 'c.js': 'export default { fetch() { for (;;) {} } };' },
                                   limits: { cpuMs: 5000 } } }),
  });
  assert.match(res.json?.error?.message ?? '', /CPU time limit \(100 ms\)/, res.text);
});

test('a child at its memory limit fails in the parent; the parent goes on', async () => {
  // CPU to spare, so that memory runs out first
  await node.deployOk('roomy', { 'index.js': PARENT }, { bindings: LOADER, limits: { cpu_ms: 5000 } });
  const bomb = `export default { fetch() { const keep = [];
    for (;;) keep.push(Array.from({ length: 10000 }, (_, i) => ({ i, s: 'v' + i }))); } };`;
  const res = await node.ingress('roomy', '/spec', {
    method: 'POST',
    body: JSON.stringify({ code: { compatibilityDate: '2025-06-01', mainModule: 'c.js',
                                   modules: { 'c.js': bomb }, limits: { memoryMB: 16 } } }),
  });
  assert.equal(res.status, 200, res.text);
  assert.match(res.json?.error?.message ?? '', /memory limit \(16 MB\)/, res.text);
  const again = await call('roomy', '/load');
  assert.equal(JSON.parse(again.ok.body).n, 1);
});

test('a memoryMB below a worker\'s floor (8) is refused with a clear RangeError', async () => {
  const res = await node.ingress('roomy', '/spec', {
    method: 'POST',
    body: JSON.stringify({ code: { compatibilityDate: '2025-06-01', mainModule: 'c.js',
                                   modules: { 'c.js': 'export default { fetch() { return new Response("x"); } };' },
                                   limits: { memoryMB: 1 } } }),
  });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json?.error?.name, 'RangeError', res.text);
  assert.match(res.json?.error?.message ?? '', /limits\.memoryMB must be at least 8 \(got 1\)/, res.text);
});

test('concurrent get() calls for one id start it once and run getCode() once', async () => {
  const r = await call('parent', '/getConcurrent?id=together');
  assert.deepEqual(r.ok, { calls: 1, ns: [1, 2, 3] }, JSON.stringify(r));
});

test('a get() child that hit a limit is discarded: the callback runs again', async () => {
  const getCode = (code) => node.ingress('parent', '/getCode', {
    method: 'POST', body: JSON.stringify({ id: 'spinner', code }) });
  const spin = { compatibilityDate: '2025-06-01', mainModule: 'c.js',
                 modules: { 'c.js': 'export default { fetch() { for (;;) {} } };' } };
  let res = await getCode(spin);
  assert.match(res.json?.error?.message ?? '', /CPU time limit/, res.text);
  const counter = { compatibilityDate: '2025-06-01', mainModule: 'c.js', modules: { 'c.js': COUNTER_CHILD } };
  res = await getCode(counter);
  assert.equal(JSON.parse(res.json?.ok?.body ?? '{}').n, 1, res.text);
  res = await getCode(counter);
  assert.equal(JSON.parse(res.json?.ok?.body ?? '{}').n, 2, res.text);
});

test('cached get() isolates are evicted when idle; the callback runs again', async () => {
  const small = await startNode({ workers: 1, extraArgs: ['--idle-timeout-s', '1'] });
  try {
    await small.deployOk('p', { 'index.js': PARENT }, { bindings: LOADER, limits: { cpu_ms: 500 } });
    const first = (await small.ingress('p', '/get?id=x')).json;
    const second = (await small.ingress('p', '/get?id=x')).json;
    assert.equal(JSON.parse(second.ok.body).n, 2);
    await sleep(4000);
    const res = await small.ingress('p', '/get?id=x');
    assert.equal(res.status, 200, res.text);
    const third = res.json;
    assert.equal(JSON.parse(third.ok.body).n, 1, `evicted and started again: ${JSON.stringify(third)}`);
    assert.ok(first.ok.getCalls >= 1);
  } finally {
    await small.stop({ clean: true });
  }
});

test('cached get() isolates count toward the process\'s isolate heap budget', async () => {
  const small = await startNode({ workers: 1, extraArgs: ['--isolate-memory-mb', '16'] });
  try {
    await small.deployOk('p', { 'index.js': PARENT }, { bindings: LOADER, limits: { cpu_ms: 500 } });
    const ids = Array.from({ length: 30 }, (_, i) => `id${i}`);
    for (const id of ids) {
      const r = await small.ingress('p', `/get?id=${id}`);
      assert.equal(r.status, 200, r.text);
    }
    // the sweep runs every second: the least recently used ids go first
    await sleep(2500);
    const first = (await small.ingress('p', '/get?id=id0')).json;
    assert.equal(JSON.parse(first.ok.body).n, 1, `id0 was evicted: ${JSON.stringify(first)}`);
    const info = await small.nodeInfo();
    const [proc] = workerList(info);
    assert.ok(proc.evictions >= 1, `evictions: ${JSON.stringify(proc)}`);
    assert.ok(proc.isolates < 31, `isolates: ${JSON.stringify(proc)}`);
  } finally {
    await small.stop({ clean: true });
  }
});

test('children left running, redeploys and eviction of their parent do not break anything', async () => {
  const churn = (tag) => `
    const slow = 'export default { async fetch() { await new Promise((r) => setTimeout(r, 30)); ' +
                 'return new Response("slow ${tag}"); } };';
    const code = { compatibilityDate: '2025-06-01', mainModule: 'c.js', modules: { 'c.js': slow } };
    export default {
      async fetch(request, env) {
        // fired and forgotten: neither awaited nor given to waitUntil
        for (let i = 0; i < 3; i++) env.LOADER.load(code).getEntrypoint().fetch('http://x/').catch(() => {});
        const cached = env.LOADER.get('g' + (Math.random() * 3 | 0), async () => code);
        const p = cached.getEntrypoint().fetch('http://x/');
        if (new URL(request.url).pathname === '/wait') return new Response(await (await p).text());
        p.catch(() => {});
        return new Response('ok');
      },
    };`;
  // Hundreds of children live at once (fired and forgotten, across three
  // versions): above the default of 100 a tenant may hold.
  await node.deployOk('churn', { 'index.js': churn('v1') }, { bindings: LOADER, limits: { cpu_ms: 500, children: 1000 } });
  const all = [];
  for (let i = 0; i < 60; i++) {
    all.push(node.ingress('churn', i % 2 ? '/wait' : '/'));
    if (i === 20) all.push(node.deployOk('churn', { 'index.js': churn('v2') }, { bindings: LOADER, limits: { cpu_ms: 500, children: 1000 } }));
    if (i === 40) all.push(node.deployOk('churn', { 'index.js': churn('v3') }, { bindings: LOADER, limits: { cpu_ms: 500, children: 1000 } }));
    if (i % 10 === 0) await sleep(20);
  }
  const results = await Promise.all(all);
  for (const r of results) {
    if (r.status === 201 || r.status === 200) continue;
    assert.fail(`unexpected ${r.status} ${r.text}`);
  }
  await waitFor(async () => (await node.ingress('churn', '/wait')).text === 'slow v3',
    { timeout: 5000, what: 'v3 to answer' });
  // everything left behind goes: the process keeps only live parents' cached
  // children. Counted before the delete, once a report newer than v3's
  // answer is in (reports come every second): v3 is loaded then, and its
  // isolate at least must go. (Counted after the delete, the figure could
  // already be the lower one, and nothing was left to drop.)
  await sleep(1200);
  const before = await isolates();
  assert.ok(before >= 1, `isolates before the delete: ${before}`);
  await node.control('DELETE', '/v1/workers/churn');
  await waitFor(async () => (await isolates()) < before,
    { timeout: 8000, what: `isolates to drop from ${before}` });
});

test('the same parent script shape as on workerd: load() then fetch(request)', async () => {
  // Exactly the documented usage, passing the incoming Request through.
  const parent = `export default {
    async fetch(request, env) {
      const worker = env.LOADER.load({
        compatibilityDate: '2025-06-01',
        mainModule: 'worker.js',
        modules: { 'worker.js': 'export default { fetch(req) { return new Response("hi from " + new URL(req.url).pathname + " " + req.method); } };' },
        env: { SOME: 'value' },
        globalOutbound: null,
      });
      return worker.getEntrypoint().fetch(request);
    },
  };`;
  await node.deployOk('workerd-shape', { 'index.js': parent }, { bindings: LOADER });
  const res = await node.ingress('workerd-shape', '/some/path', { method: 'POST', body: 'x' });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.text, 'hi from /some/path POST');
});

test('load(): a long request that loads children one after another holds a few at a time', async () => {
  // An agent evaluating snippets in a loop: each child is done with once its
  // response is read and its stub is garbage. More than the 1,000 children a
  // parent may hold at once, so every one of them must go before the request ends.
  const serial = `export default {
    async fetch(request, env) {
      const n = Number(new URL(request.url).searchParams.get('n'));
      let ok = 0;
      for (let i = 0; i < n; i++) {
        const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js',
          modules: { 'c.js': 'export default { fetch() { return new Response("child ' + i + '"); } };' } });
        const res = await stub.getEntrypoint().fetch('http://child/');
        if ((await res.text()) === 'child ' + i) ok++;
      }
      // long enough for the process to report its isolates once more
      await new Promise((resolve) => setTimeout(resolve, 1500));
      return Response.json({ ok });
    },
  };`;
  await node.deployOk('serial', { 'index.js': serial },
    { bindings: LOADER, limits: { cpu_ms: 10000, wall_ms: 280000 } });
  let most = 0;
  let done = false;
  const watch = (async () => {
    while (!done) {
      most = Math.max(most, (await isolates()) ?? 0);
      await sleep(250);
    }
  })();
  const res = await node.ingress('serial', '/?n=1100', { timeout: 290000 });
  done = true;
  await watch;
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.json, { ok: 1100 });
  assert.ok(most > 1 && most < 400, `isolates alive at once: at most ${most}`);
  await node.control('DELETE', '/v1/workers/serial');
});

test('a parent starting many children at once shares its turns with other tenants', async () => {
  // Each child's start is a unit of work of its own; they all take turns
  // within the parent's, so another tenant in the same process is served
  // while the fan-out is still going, not once all of it is done.
  const fanout = `export default {
    async fetch(request, env) {
      const n = Number(new URL(request.url).searchParams.get('n'));
      const stubs = [];
      for (let i = 0; i < n; i++) {
        stubs.push(env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js',
          modules: { 'c.js': 'export default { fetch() { return new Response(String(Date.now())); } }; // ' + i } }));
      }
      const times = await Promise.all(stubs.map(async (s) => Number(await (await s.getEntrypoint().fetch('http://c/')).text())));
      return Response.json({ first: Math.min(...times), last: Math.max(...times) });
    },
  };`;
  // 200 live at once: above the default of 100 a tenant may hold.
  await node.deployOk('fanout', { 'index.js': fanout },
    { bindings: LOADER, limits: { cpu_ms: 30000, wall_ms: 120000, children: 200 } });
  await node.deployOk('bystander', { 'index.js':
    'export default { fetch() { return new Response(String(Date.now())); } };' });
  assert.equal((await node.ingress('bystander', '/')).status, 200);
  let done = false;
  const served = [];
  const fan = node.ingress('fanout', '/?n=200', { timeout: 120000 }).finally(() => { done = true; });
  while (!done) {
    const r = await node.ingress('bystander', '/', { timeout: 120000 });
    assert.equal(r.status, 200, r.text);
    served.push(Number(r.text));
    await sleep(5);
  }
  const res = await fan;
  assert.equal(res.status, 200, res.text);
  const { first, last } = res.json;
  const during = served.filter((t) => t > first && t < last);
  assert.ok(during.length > 0,
    `the other tenant was served ${served.length} times, none while the children ran (${first}..${last}): ${served.join(' ')}`);
  await node.control('DELETE', '/v1/workers/fanout');
  await node.control('DELETE', '/v1/workers/bystander');
});

test('the CPU a child spends failing to start counts towards its parent tenant', async () => {
  // A child whose top-level code spins until its CPU limit stops it: the load
  // fails, and the CPU it burnt is the parent tenant's all the same (the
  // cordoning monitor reads these figures).
  const spinner = `export default {
    async fetch(request, env) {
      const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 's.js', limits: { cpuMs: 40 },
        modules: { 's.js': 'for (;;) {}\\nexport default { fetch() { return new Response("never"); } };' } });
      try {
        await stub.getEntrypoint().fetch('http://child/');
        return new Response('started?');
      } catch (err) {
        return new Response(err.message);
      }
    },
  };`;
  await node.deployOk('spinner', { 'index.js': spinner }, { bindings: LOADER, limits: { cpu_ms: 500 } });
  const stats = async () => (await node.control('GET', '/v1/tenants/spinner')).json;
  for (let i = 0; i < 3; i++) {
    const res = await node.ingress('spinner', '/');
    assert.equal(res.status, 200, res.text);
    assert.match(res.text, /CPU/);
  }
  // Three loads stopped at 40 ms each: at least 90 ms of CPU and three limit
  // hits, reported within a second or two (a load may take more than its
  // 40 ms, so the CPU can be there before the third hit is).
  await waitFor(async () => {
    const s = await stats();
    return s.cpu_ms >= 90 && s.cpu_limit_hits >= 3;
  }, { timeout: 5000, what: 'the failed loads\' CPU and limit hits in the tenant\'s figures' });
  await node.control('DELETE', '/v1/workers/spinner');
});

// A parent's children share a memory budget (8 times the parent's limit):
// each alone is held to the parent's limit, but together they were held to
// nothing, and one tenant could push its worker process past its budget.
test('a parent\'s children together are held to 8 times its memory limit', async () => {
  const hog = `export default {
    async fetch(request, env) {
      const busy = new URL(request.url).searchParams.get('busy') === '1';
      const child = \`globalThis.keep = new Uint8Array(12 * 1024 * 1024).fill(7);
        export default { async fetch() { \${busy ? 'await scheduler.wait(3000);' : ''} return new Response('held'); } };\`;
      const stubs = [];
      const answers = [];
      for (let i = 0; i < 16; i++) {
        const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js', modules: { 'c.js': child } });
        stubs.push(stub);
        const answer = stub.getEntrypoint().fetch('http://c/').then((r) => r.text(), (e) => e.message);
        if (!busy) answers.push(await answer);
        else { answers.push(answer); await scheduler.wait(20); }
      }
      const all = await Promise.all(answers);
      // The first child again: made anew if it had to go.
      const again = await stubs[0].getEntrypoint().fetch('http://c/').then((r) => r.text(), (e) => e.message);
      return Response.json({ all, again });
    },
  };`;
  await node.deployOk('hog', { 'index.js': hog },
    { bindings: LOADER, limits: { memory_mb: 16, cpu_ms: 2000, wall_ms: 20000 } });
  // Children that are done make room: the oldest idle ones go, every load works.
  const idle = await node.ingress('hog', '/', { timeout: 30000 });
  assert.equal(idle.status, 200, idle.text);
  assert.deepEqual(idle.json.all, Array(16).fill('held'));
  assert.equal(idle.json.again, 'held');
  // Children that are all busy cannot: once they hold the budget, load() fails.
  const busy = await node.ingress('hog', '/?busy=1', { timeout: 30000 });
  assert.equal(busy.status, 200, busy.text);
  const held = busy.json.all.filter((a) => a === 'held').length;
  const refused = busy.json.all.filter((a) => /their budget together is 128 MiB \(8 times its memory limit\)/.test(a));
  assert.ok(held >= 8 && held <= 12, JSON.stringify(busy.json.all));
  assert.equal(held + refused.length, 16, JSON.stringify(busy.json.all));
  await node.control('DELETE', '/v1/workers/hog');
});

// A parent whose routes each try one thing a script ported from workerd
// does; every answer is {ok} or {error: {name, message}}.
const QA_PARENT = `
const code = (modules, extra = {}) => ({ compatibilityDate: '2025-06-01', mainModule: 'a.js', modules, ...extra });
const tryFetch = \`export default { async fetch() {
  const seen = [];
  for (let i = 0; i < 2; i++) {
    try { await fetch('http://127.0.0.1:1/'); seen.push('fetched'); } catch (e) { seen.push(e.message); }
  }
  return Response.json(seen);
} };\`;
const routes = {
  binding(url, env) {
    return { load: typeof env.LOADER?.load, get: typeof env.LOADER?.get };
  },
  async subrequests(url, env) {
    // Two fetch() calls per request, three allowed per request.
    const stub = env.LOADER.get('sub', async () => code({ 'a.js': tryFetch }, { limits: { subRequests: 3 } }));
    return (await stub.getEntrypoint().fetch('http://c/')).json();
  },
  async subrequestsTight(url, env) {
    const stub = env.LOADER.load(code({ 'a.js': tryFetch }, { limits: { subRequests: 1 } }));
    return (await stub.getEntrypoint().fetch('http://c/')).json();
  },
  async abort(url, env) {
    const slow = code({ 'a.js': 'export default { async fetch() { await scheduler.wait(1500); return new Response("late"); } };' });
    const stub = env.LOADER.load(slow);
    const controller = new AbortController();
    const pending = stub.getEntrypoint().fetch('http://c/', { signal: controller.signal });
    await scheduler.wait(10);
    controller.abort();
    const first = await pending.then(() => 'answered', (e) => e.name);
    const before = await stub.getEntrypoint().fetch(new Request('http://c/', { signal: AbortSignal.abort() }))
      .then(() => 'answered', (e) => e.name);
    const fine = await stub.getEntrypoint().fetch('http://c/', { signal: new AbortController().signal });
    return { first, before, fine: await fine.text() };
  },
  async env(url, env) {
    const echo = { 'a.js': 'export default { fetch(r, env) { return Response.json(env); } };' };
    const tryEnv = (value) => {
      try {
        env.LOADER.load(code(echo, { env: value }));
        return 'loaded';
      } catch (e) {
        return e.name + ': ' + e.message;
      }
    };
    const plain = await env.LOADER.load(code(echo, { env: { a: [1, 'two', null, { b: true }], n: 1.5 } }))
      .getEntrypoint().fetch('http://c/');
    return { plain: await plain.json(), fn: tryEnv({ f() {} }), map: tryEnv({ m: new Map([[1, 2]]) }),
             date: tryEnv({ d: new Date(0) }), binding: tryEnv({ L: env.LOADER }),
             nan: tryEnv({ n: NaN }), nested: tryEnv({ a: [{ s: Symbol('x') }] }) };
  },
  async startErrors(url, env) {
    const fail = (modules) => env.LOADER.load(code(modules)).getEntrypoint().fetch('http://c/')
      .then(() => null, (e) => ({ name: e.name, message: e.message }));
    return {
      syntax: await fail({ 'a.js': 'import "./b.js"; export default {};', 'b.js': 'export const x = (;' }),
      top: await fail({ 'a.js': '\\nthrow new RangeError("at the top"); export default {};' }),
      handler: await fail({ 'a.js': 'export default { fetch() { throw new TypeError("in fetch"); } };' }),
    };
  },
  async bigText(url, env) {
    // 65 MiB in one {text} module: over the limit before any wrapping.
    env.LOADER.load(code({ 'a.js': 'export default {};', 'big.txt': { text: 'x'.repeat(65 * 1024 * 1024) } }));
    return 'loaded';
  },
};
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    try {
      return Response.json({ ok: await routes[url.pathname.slice(1)](url, env, request) });
    } catch (err) {
      return Response.json({ error: { name: err.name, message: err.message } });
    }
  },
};`;

test('ported parent scripts: deploy; the parent runs with its loader binding', async () => {
  const r = await node.deployOk('qa', { 'index.js': QA_PARENT }, { bindings: LOADER, limits: { cpu_ms: 2000 } });
  assert.equal(r.status, 201, r.text);
  const seen = await call('qa', '/binding');
  assert.deepEqual(seen.ok, { load: 'function', get: 'function' }, JSON.stringify(seen));
});

test('limits.subRequests is per request: a cached get() child does not run dry', async () => {
  for (let i = 0; i < 3; i++) {
    const r = await call('qa', '/subrequests');
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.ok.length, 2);
    for (const seen of r.ok) assert.doesNotMatch(seen, /subrequest limit/, `request ${i}: ${JSON.stringify(r)}`);
  }
  const tight = await call('qa', '/subrequestsTight');
  assert.doesNotMatch(tight.ok[0], /subrequest limit/, JSON.stringify(tight));
  assert.match(tight.ok[1], /exceeded its subrequest limit \(1 per request\)/, JSON.stringify(tight));
});

test('an AbortSignal given to fetch() ends the parent\'s wait for the child', async () => {
  const r = await call('qa', '/abort');
  assert.deepEqual(r.ok, { first: 'AbortError', before: 'AbortError', fine: 'late' }, JSON.stringify(r));
});

test('env values JSON would change or drop are refused, naming the key', async () => {
  const r = await call('qa', '/env');
  assert.ok(r.ok, JSON.stringify(r));
  assert.deepEqual(r.ok.plain, { a: [1, 'two', null, { b: true }], n: 1.5 });
  assert.match(r.ok.fn, /^TypeError: env value 'f': a function cannot be given to a dynamic worker/);
  assert.match(r.ok.map, /^TypeError: env value 'm': a Map cannot be given/);
  assert.match(r.ok.date, /^TypeError: env value 'd': a Date cannot be given/);
  assert.match(r.ok.binding, /^TypeError: env value 'L': a WorkerLoader cannot be given/);
  assert.match(r.ok.nan, /^TypeError: env value 'n': NaN is not a JSON number/);
  assert.match(r.ok.nested, /^TypeError: env value 's': a symbol cannot be given/);
});

test('a child that fails to start says where; a throw in its fetch() does not need to', async () => {
  const r = await call('qa', '/startErrors');
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.ok.syntax.name, 'SyntaxError', JSON.stringify(r));
  assert.match(r.ok.syntax.message, /\n {2}at b\.js:1:\d+$/, JSON.stringify(r));
  assert.equal(r.ok.top.name, 'RangeError', JSON.stringify(r));
  assert.equal(r.ok.top.message, 'at the top\n  at a.js:2:7', JSON.stringify(r));
  assert.deepEqual(r.ok.handler, { name: 'TypeError', message: 'in fetch' });
});

test('a {text} module over 64 MiB is refused clearly, not by the parent running out of memory', async () => {
  const res = await node.ingress('qa', '/bigText', { timeout: 30000 });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.json.error?.name, 'Error', res.text);
  assert.match(res.json.error.message, /exceeds the maximum allowed size of 67108864 bytes/);
  await node.control('DELETE', '/v1/workers/qa');
});

test('a child\'s throw keeps its place in its stack; its console lines carry the parent\'s request id', async () => {
  const parent = `export default {
    async fetch(request, env) {
      console.log('parent-mark');
      const child = env.LOADER.load({ compatibilityDate: '2025-01-01', mainModule: 'kid.js', modules: {
        'kid.js': "import { fail } from './deep.js';\\nexport default { fetch() { console.log('child-mark'); fail(); } };",
        'deep.js': "export function fail() {\\n  throw new RangeError('deep down');\\n}",
      } });
      try { await child.getEntrypoint().fetch('http://child/'); return Response.json({ threw: false }); }
      catch (err) { return Response.json({ name: err.name, message: err.message, stack: err.stack }); }
    },
  };`;
  await node.deployOk('stacky', { 'index.js': parent }, { bindings: LOADER });
  const r = await node.ingress('stacky', '/');
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.name, 'RangeError', r.text);
  assert.equal(r.json.message, 'deep down', 'the message stays as thrown');
  assert.match(r.json.stack, /^RangeError: deep down\n/, r.text);
  assert.match(r.json.stack, /at fail \(deep\.js:2:9\)/, r.text);
  assert.match(r.json.stack, /kid\.js:2:\d+/, r.text);
  assert.doesNotMatch(r.json.stack, /edgenode:/, r.text);
  const mine = await node.waitForLog((l) => l.json?.msg === 'parent-mark', { what: 'the parent\'s line' });
  const kid = await node.waitForLog((l) => l.json?.msg === 'child-mark', { what: 'the child\'s line' });
  assert.ok(mine.json.request_id, mine.raw);
  assert.equal(kid.json.request_id, mine.json.request_id, kid.raw);
  await node.control('DELETE', '/v1/workers/stacky');
});

// Per-tenant accounting through the control API: GET /v1/tenants and
// GET /v1/tenants/{name}. Worker processes report deltas about once a
// second; the supervisor sums them across processes.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { sleep, startNode, waitFor } from './lib/node.mjs';

let node;

const ALPHA = `export default {
  fetch() {
    let x = 0;
    for (let i = 0; i < 200000; i++) x += i % 7;
    return new Response('alpha ' + x);
  },
};
`;

// /throw: uncaught exception (500 from the node); /500: the worker's own
// 500; /slow: 100 ms of awaiting; anything else: 200.
const BETA = `export default {
  async fetch(request) {
    const path = new URL(request.url).pathname;
    if (path === '/throw') throw new Error('beta broke');
    if (path === '/500') return new Response('beta says no', { status: 500 });
    if (path === '/404') return new Response('nothing here', { status: 404 });
    if (path === '/slow') await new Promise((resolve) => setTimeout(resolve, 100));
    return new Response('beta');
  },
};
`;

const ALPHA_REQUESTS = 24;

before(async () => {
  node = await startNode({ workers: 2 });
  await node.deployOk('alpha', ALPHA);
  await node.deployOk('beta', BETA);
  await node.deployOk('gamma', `export default { fetch() { return new Response('gamma'); } };`);
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

async function tenant(name) {
  const r = await node.control('GET', `/v1/tenants/${name}`);
  assert.equal(r.status, 200, r.text);
  return r.json;
}

// Waits until the counters stop at the expected values (and stay there for
// longer than one report interval, so nothing is counted twice).
async function settled(name, expect) {
  const matches = (s) => Object.entries(expect).every(([k, v]) => s[k] === v);
  await waitFor(async () => matches(await tenant(name)), {
    timeout: 5000, interval: 100,
    what: `${name} counters ${JSON.stringify(expect)}`,
  }).catch(async (err) => {
    err.message += `\nlast: ${JSON.stringify(await tenant(name))}`;
    throw err;
  });
  await sleep(1200);
  const s = await tenant(name);
  for (const [k, v] of Object.entries(expect)) assert.equal(s[k], v, `${name}.${k} later: ${JSON.stringify(s)}`);
  return s;
}

test('requests are counted exactly, across worker processes', async () => {
  // concurrently on fresh connections, so both processes take some
  const answers = await Promise.all(Array.from({ length: ALPHA_REQUESTS }, () => node.ingress('alpha', '/')));
  for (const r of answers) assert.equal(r.status, 200, r.text);
  const s = await settled('alpha', { requests: ALPHA_REQUESTS, errors: 0 });
  assert.equal(s.name, 'alpha');
  assert.equal(s.deployed, true);
  assert.deepEqual(s.limits, { cpu_ms: 50, memory_mb: 128, wall_ms: 30000 });
  for (const k of ['cpu_limit_hits', 'memory_limit_hits', 'wall_limit_hits']) assert.equal(s[k], 0, k);
  assert.ok(s.cold_starts >= 1 && s.cold_starts <= 2, `one cold start per process at most: ${s.cold_starts}`);
  // 200,000 iterations of arithmetic per request: some CPU time, never more than the wall time
  assert.ok(s.cpu_ms > 0, `cpu_ms: ${s.cpu_ms}`);
  assert.ok(s.wall_ms > 0, `wall_ms: ${s.wall_ms}`);
  assert.ok(s.cpu_ms <= s.wall_ms + 1, `cpu_ms ${s.cpu_ms} <= wall_ms ${s.wall_ms}`);
  assert.ok(s.heap_used > 0, `heap_used: ${s.heap_used}`);
  assert.ok(s.heap_peak > 0, `heap_peak: ${s.heap_peak}`);
  assert.ok(Array.isArray(s.loaded_in) && s.loaded_in.length >= 1, `loaded_in: ${JSON.stringify(s.loaded_in)}`);
});

test('errors count 5xx answers: uncaught exceptions and the worker\'s own 500s', async () => {
  const plan = ['/throw', '/throw', '/500', '/500', '/500', '/404', '/', '/'];
  for (const p of plan) {
    const r = await node.ingress('beta', p);
    const want = p === '/' ? 200 : p === '/404' ? 404 : 500;
    assert.equal(r.status, want, `${p}: ${r.text}`);
  }
  await settled('beta', { requests: plan.length, errors: 5 });
});

test('wall_ms adds up the time requests take, awaits included', async () => {
  const before = await tenant('beta');
  for (let i = 0; i < 3; i++) assert.equal((await node.ingress('beta', '/slow')).status, 200);
  const s = await settled('beta', { requests: before.requests + 3 });
  assert.ok(s.wall_ms - before.wall_ms >= 300, `wall_ms grew by ${s.wall_ms - before.wall_ms}`);
  // awaiting a timer costs no CPU
  assert.ok(s.cpu_ms - before.cpu_ms < 100, `cpu_ms grew by ${s.cpu_ms - before.cpu_ms}`);
});

test('GET /v1/tenants lists every deployed worker with its statistics', async () => {
  const r = await node.control('GET', '/v1/tenants');
  assert.equal(r.status, 200, r.text);
  assert.match(r.headers['content-type'] ?? '', /application\/json/);
  const list = r.json.tenants;
  assert.ok(Array.isArray(list), r.text);
  assert.deepEqual(list.map((t) => t.name).sort(), ['alpha', 'beta', 'gamma']);
  for (const t of list) {
    for (const k of ['requests', 'errors', 'cpu_ms', 'wall_ms', 'heap_used', 'heap_peak',
      'cpu_limit_hits', 'memory_limit_hits', 'wall_limit_hits']) {
      assert.equal(typeof t[k], 'number', `${t.name}.${k} in ${JSON.stringify(t)}`);
      assert.ok(t[k] >= 0, `${t.name}.${k} >= 0`);
    }
  }
  const byName = Object.fromEntries(list.map((t) => [t.name, t]));
  assert.equal(byName.alpha.requests, ALPHA_REQUESTS);
  assert.equal(byName.alpha.errors, 0);
  assert.equal(byName.beta.errors, 5);
  // deployed, never requested: all zero
  assert.equal(byName.gamma.requests, 0);
  assert.equal(byName.gamma.heap_used, 0);
  // the list and the single view agree
  const alpha = await tenant('alpha');
  for (const k of ['requests', 'errors', 'cpu_ms', 'wall_ms', 'heap_peak']) {
    assert.equal(byName.alpha[k], alpha[k], k);
  }
});

test('a tenant that was never deployed is 404', async () => {
  const r = await node.control('GET', '/v1/tenants/nosuch');
  assert.equal(r.status, 404, r.text);
  assert.equal(typeof r.json?.error, 'string', r.text);
  // not a worker name at all: 400, as every route taking one answers
  assert.equal((await node.control('GET', '/v1/tenants/Bad_Name')).status, 400);
});

// Any Host name reaches a worker process: none may leave a record behind.
test('requests for an unknown worker do not make it a tenant', async () => {
  for (let i = 0; i < 5; i++) assert.equal((await node.ingress('ghost', '/')).status, 404);
  await sleep(1200);
  assert.equal((await node.control('GET', '/v1/tenants/ghost')).status, 404);
  const list = (await node.control('GET', '/v1/tenants')).json.tenants;
  assert.ok(!list.some((t) => t.name === 'ghost'), 'ghost not listed');
});

test('the tenant endpoints need the bearer token and take only GET', async () => {
  for (const p of ['/v1/tenants', '/v1/tenants/alpha', '/v1/tenants/nosuch']) {
    const none = await node.control('GET', p, { token: null });
    assert.equal(none.status, 401, `${p} without a token: ${none.text}`);
    assert.equal(none.json?.requests, undefined, 'no statistics without the token');
    assert.equal(none.json?.tenants, undefined, 'no statistics without the token');
    const wrong = await node.control('GET', p, { token: 'not-the-token' });
    assert.equal(wrong.status, 401, `${p} with a wrong token`);
  }
  const post = await node.control('POST', '/v1/tenants', { body: {} });
  assert.equal(post.status, 405, post.text);
  const del = await node.control('DELETE', '/v1/tenants/alpha');
  assert.equal(del.status, 405, del.text);
  assert.equal((await tenant('alpha')).requests, ALPHA_REQUESTS, 'still there');
});

// Answers at once. The collections its ArrayBuffers force find the targets
// it registered gone (in this request's, or by the next one's), and the
// registry's callback then spins, after the request is done.
const DELTA = `const registry = new FinalizationRegistry(() => { for (;;) {} });
function registerTen() { for (let i = 0; i < 10; i++) registry.register({ i }, i); }
function fillToTheCap() {
  const kept = [];
  try { for (;;) kept.push(new ArrayBuffer(8 << 20)); } catch {}
  return kept.length;
}
export default {
  fetch() {
    registerTen();
    return new Response('buffers ' + fillToTheCap());
  },
};
`;

test('CPU used after the request, by a FinalizationRegistry callback, is the tenant\'s', async () => {
  // One worker process, so that both requests reach the same isolate.
  const one = await startNode({ workers: 1 });
  try {
    await one.deployOk('delta', DELTA, { json: true, limits: { cpu_ms: 300, memory_mb: 32 } });
    for (let i = 0; i < 2; i++) {
      const r = await one.ingress('delta', '/');
      assert.equal(r.status, 200, r.text);
    }
    // The callback ran to the CPU limit: a hit, and at least the limit in all.
    await waitFor(async () => {
      const s = (await one.control('GET', '/v1/tenants/delta')).json;
      return s.requests === 2 && s.cpu_limit_hits >= 1 && s.cpu_ms >= 300;
    }, { timeout: 5000, interval: 100, what: 'the callback\'s CPU in delta\'s counters' }).catch(async (err) => {
      err.message += `\nlast: ${(await one.control('GET', '/v1/tenants/delta')).text}`;
      throw err;
    });
    const s = (await one.control('GET', '/v1/tenants/delta')).json;
    assert.equal(s.errors, 0);
  } finally {
    await one.stop({ clean: true });
  }
});

// console output is the tenant's own text: a NUL must not end the log line's
// message early (hiding what follows), and a line cut at the length limit
// must stay a JSON line, not half a character.
test('console output is logged whole: NUL bytes kept, long lines cut on a character', async () => {
  await node.deployOk('talker', `export default {
  fetch() {
    console.log('before\\u0000after');
    console.error(new Error('with\\u0000nul'));
    console.log('a'.repeat(3499) + '\\u00e9');
    return new Response('said');
  },
};
`, { json: true, limits: { cpu_ms: 1000 } }); // a cold start on sanitizer builds
  const from = node.logs.length;
  const r = await node.ingress('talker', '/');
  assert.equal(r.text, 'said');
  const mine = (l) => l.json?.tenant === 'talker' && l.json?.source === 'console';
  await waitFor(() => node.logs.slice(from).filter(mine).length >= 3, { what: 'three console lines' });
  const msgs = node.logs.slice(from).filter(mine).map((l) => l.json.msg);
  assert.ok(msgs.includes('before\u0000after'), JSON.stringify(msgs.map((m) => m.slice(0, 40))));
  assert.ok(msgs.some((m) => m.startsWith('Error: with\u0000nul')), 'the error keeps its message');
  const long = msgs.find((m) => m.startsWith('aaaa'));
  assert.equal(long, 'a'.repeat(3499), 'cut before the character that does not fit');
  assert.deepEqual(node.malformedLogs().map((l) => l.raw), []);
});

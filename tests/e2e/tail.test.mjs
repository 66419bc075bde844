// Live logs: GET /v1/workers/{name}/tail and GET /v1/runs/{id}/tail stream
// console lines, exceptions and request lines (NDJSON or SSE), with status
// and sample filters; a reader that stops reading loses lines (counted)
// while the tenant's requests go on; `edgectl tail`.
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { EDGECTL, dedicatedReady, sleep, startNode, waitFor } from './lib/node.mjs';

let node;

before(async () => {
  node = await startNode({ workers: 2 });
  await node.deployOk('logs', `export default {
    async fetch(request) {
      const url = new URL(request.url);
      if (url.pathname === '/throw') {
        throw new TypeError('boom at ' + url.pathname);
      }
      if (url.pathname === '/status') {
        return new Response('s', { status: Number(url.searchParams.get('s')) });
      }
      if (url.pathname === '/flood') {
        const big = 'x'.repeat(8000);
        for (let i = 0; i < 100; i++) console.log(i + ' ' + big);
        return new Response('flooded');
      }
      console.log('hello from', url.pathname);
      console.warn('careful', 42);
      return new Response('ok');
    },
  };`, { limits: { cpu_ms: 2000 } });
});

after(async () => {
  if (node) await node.stop({ clean: true });
});

// A tail as a reader: lines collected as they come; waitLine(pred) resolves
// with the first line (old or new) that matches.
function openTail(path, { sse = false, token } = {}) {
  return new Promise((resolve, reject) => {
    const headers = { authorization: `Bearer ${token ?? node.token}` };
    if (sse) headers.accept = 'text/event-stream';
    const req = http.request({ host: '127.0.0.1', port: node.controlPort, path, headers, agent: false });
    req.on('error', reject);
    req.on('response', (res) => {
      const tail = { res, status: res.statusCode, headers: res.headers, lines: [], raw: '', waiters: [] };
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        tail.raw += d;
        buf += d;
        const sep = sse ? '\n\n' : '\n';
        let i;
        while ((i = buf.indexOf(sep)) >= 0) {
          const chunk = buf.slice(0, i);
          buf = buf.slice(i + sep.length);
          const data = sse ? chunk.split('\n').find((l) => l.startsWith('data: '))?.slice(6) : chunk;
          const line = JSON.parse(data);
          if (sse) line.event = chunk.split('\n').find((l) => l.startsWith('event: '))?.slice(7);
          tail.lines.push(line);
          tail.waiters = tail.waiters.filter((w) => !(w.pred(line) && (w.resolve(line), true)));
        }
      });
      res.on('error', () => {});
      tail.waitLine = (pred, what = 'tail line', timeout = 10000) => {
        const seen = tail.lines.find(pred);
        if (seen) return Promise.resolve(seen);
        return new Promise((res2, rej2) => {
          const timer = setTimeout(() => rej2(new Error(`no ${what}; got ${JSON.stringify(tail.lines).slice(0, 2000)}`)), timeout);
          tail.waiters.push({ pred, resolve: (l) => { clearTimeout(timer); res2(l); } });
        });
      };
      tail.close = () => req.destroy();
      if (res.statusCode !== 200) {
        let body = '';
        res.on('data', (d) => { body += d; });
        res.on('end', () => { tail.json = JSON.parse(body || tail.raw); resolve(tail); });
        return;
      }
      tail.waitLine((l) => l.type === 'attached', 'attached line').then(() => resolve(tail), reject);
    });
    req.end();
  });
}

// The worker processes hear of a new tail asynchronously: request until a
// request line for `path` shows up, then the tail is live in every process.
async function untilSeen(tail, name, path) {
  await waitFor(async () => {
    await node.ingress(name, path);
    return tail.lines.some((l) => l.type === 'request' && l.url.endsWith(path));
  }, { timeout: 10000, what: `a request line for ${path}` });
}

test('a tail shows console lines, exceptions with their stack, and request lines', async () => {
  const tail = await openTail('/v1/workers/logs/tail');
  assert.equal(tail.headers['content-type'], 'application/x-ndjson');
  try {
    await untilSeen(tail, 'logs', '/warmup');
    const r = await node.ingress('logs', '/first');
    assert.equal(r.status, 200);
    const log = await tail.waitLine((l) => l.type === 'log' && l.message === 'hello from /first');
    assert.equal(log.level, 'info');
    assert.match(log.request_id, /^[0-9a-f]{16}$/);
    assert.match(log.time, /^\d{4}-\d\d-\d\dT/);
    const warn = await tail.waitLine((l) => l.type === 'log' && l.level === 'warn' && l.request_id === log.request_id);
    assert.equal(warn.message, 'careful 42');
    const req = await tail.waitLine((l) => l.type === 'request' && l.request_id === log.request_id);
    assert.equal(req.method, 'GET');
    assert.ok(req.url.endsWith('/first'), req.url);
    assert.equal(req.status, 200);
    assert.equal(req.outcome, 'ok');
    assert.equal(typeof req.cpu_ms, 'number');
    assert.ok(req.cpu_ms >= 0 && req.wall_ms >= 0, JSON.stringify(req));

    const bad = await node.ingress('logs', '/throw');
    assert.equal(bad.status, 500);
    const ex = await tail.waitLine((l) => l.type === 'exception');
    assert.match(ex.message, /TypeError: boom at \/throw/);
    assert.match(ex.stack, /index\.js:\d+:\d+/);
    const failed = await tail.waitLine((l) => l.type === 'request' && l.request_id === ex.request_id);
    assert.equal(failed.status, 500);
    assert.equal(failed.outcome, 'exception');
  } finally {
    tail.close();
  }
});

test("a loader child's console lines go to its parent's tail, with the parent's request id", async () => {
  const child = 'export default { fetch() { console.log("child speaks"); return new Response("c"); } };';
  await node.deployOk('parent', { 'index.js': `export default { async fetch(request, env) {
    const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js', modules: { 'c.js': ${JSON.stringify(child)} } });
    const res = await stub.getEntrypoint().fetch('http://child.example/');
    return new Response('parent got ' + await res.text());
  } };` }, { bindings: { LOADER: { type: 'loader' } }, limits: { cpu_ms: 2000 } });
  const tail = await openTail('/v1/workers/parent/tail');
  try {
    await untilSeen(tail, 'parent', '/p');
    const log = await tail.waitLine((l) => l.type === 'log' && l.message === 'child speaks');
    assert.match(log.sandbox, /^loader/);
    assert.match(log.request_id, /^[0-9a-f]{16}$/);
    const req = await tail.waitLine((l) => l.type === 'request' && l.request_id === log.request_id,
      'the parent request line with the same request id');
    assert.equal(req.status, 200);
    assert.equal(tail.lines.filter((l) => l.type === 'request' && !l.url.endsWith('/p')).length, 0,
      'no request line of its own for the child');
  } finally {
    tail.close();
  }
});

test('SSE when the client asks for text/event-stream', async () => {
  const tail = await openTail('/v1/workers/logs/tail', { sse: true });
  try {
    assert.equal(tail.headers['content-type'], 'text/event-stream');
    assert.equal(tail.lines[0].event, 'attached');
    await untilSeen(tail, 'logs', '/sse');
    const req = await tail.waitLine((l) => l.type === 'request');
    assert.equal(req.event, 'request');
  } finally {
    tail.close();
  }
});

test('?status= keeps the request and exception lines that match', async () => {
  const tail = await openTail('/v1/workers/logs/tail?status=5xx,404');
  try {
    await waitFor(async () => {
      await node.ingress('logs', '/status?s=503');
      return tail.lines.some((l) => l.type === 'request' && l.status === 503);
    }, { timeout: 10000, what: 'a 503 request line' });
    for (const s of [200, 404, 201, 500]) await node.ingress('logs', `/status?s=${s}`);
    await node.ingress('logs', '/throw');
    await node.ingress('logs', '/plain');
    await tail.waitLine((l) => l.type === 'request' && l.status === 500 && l.url.endsWith('/throw'));
    await tail.waitLine((l) => l.type === 'request' && l.status === 404);
    await tail.waitLine((l) => l.type === 'exception');
    const kept = tail.lines.filter((l) => l.type !== 'attached');
    for (const l of kept) {
      assert.ok(l.type === 'exception' || l.status >= 500 || l.status === 404, JSON.stringify(l));
    }
  } finally {
    tail.close();
  }
  const errors = await openTail('/v1/workers/logs/tail?status=error');
  try {
    await waitFor(async () => {
      await node.ingress('logs', '/throw');
      return errors.lines.some((l) => l.type === 'request');
    }, { timeout: 10000, what: 'an error request line' });
    await node.ingress('logs', '/fine');
    await node.ingress('logs', '/throw');
    await waitFor(() => errors.lines.filter((l) => l.type === 'request').length >= 2, { what: 'two error lines' });
    assert.ok(errors.lines.every((l) => l.type !== 'request' || l.outcome !== 'ok'));
  } finally {
    errors.close();
  }
});

test('?sample= keeps about that share of requests, with all of their lines', async () => {
  const all = await openTail('/v1/workers/logs/tail');
  const some = await openTail('/v1/workers/logs/tail?sample=0.2');
  try {
    await untilSeen(all, 'logs', '/warm-sample');
    await untilSeen(some, 'logs', '/warm-sample'); // untilSeen may take a few requests
    const before = some.lines.filter((l) => l.type === 'request').length;
    const beforeAll = all.lines.filter((l) => l.type === 'request').length;
    for (let i = 0; i < 200; i++) await node.ingress('logs', `/s${i}`);
    await waitFor(() => all.lines.filter((l) => l.type === 'request').length >= beforeAll + 200, { what: 'all 200 request lines' });
    await sleep(200); // the sampled tail gets its lines in the same frames
    const kept = some.lines.filter((l) => l.type === 'request').length - before;
    assert.ok(kept > 10 && kept < 90, `kept ${kept} of 200 at 0.2`);
    // A sampled request keeps its console lines too.
    for (const r of some.lines.filter((l) => l.type === 'request' && l.status === 200 && /\/s\d+$/.test(l.url))) {
      assert.ok(some.lines.some((l) => l.type === 'log' && l.request_id === r.request_id), r.url);
    }
  } finally {
    all.close();
    some.close();
  }
});

test('bad filters, unknown workers and a missing token are refused', async () => {
  let t = await openTail('/v1/workers/logs/tail?status=teapot');
  assert.equal(t.status, 400);
  assert.equal(t.json.key, 'status');
  t = await openTail('/v1/workers/logs/tail?status=');
  assert.equal(t.status, 400);
  t = await openTail('/v1/workers/logs/tail?status=5xx,600');
  assert.equal(t.status, 400);
  t = await openTail('/v1/workers/logs/tail?sample=0');
  assert.equal(t.status, 400);
  assert.equal(t.json.key, 'sample');
  t = await openTail('/v1/workers/logs/tail?sample=abc');
  assert.equal(t.status, 400);
  t = await openTail('/v1/workers/nosuch/tail');
  assert.equal(t.status, 404);
  assert.equal(t.json.error, 'unknown worker');
  t = await openTail('/v1/workers/logs/tail', { token: 'wrong' });
  assert.equal(t.status, 401);
  t = await openTail('/v1/runs/bad%20id/tail');
  assert.equal(t.status, 400);
  const r = await node.control('POST', '/v1/workers/logs/tail');
  assert.equal(r.status, 405);
  const run = await node.control('POST', '/v1/run', {
    body: { modules: { 'a.js': 'export default { fetch() { return new Response("x"); } }' }, tail_id: 'no spaces' },
  });
  assert.equal(run.status, 400);
  assert.match(run.json.error, /tail_id/);
});

test('a /v1/run sandbox is tailed by the tail_id it was given', async () => {
  const tail = await openTail('/v1/runs/job-1/tail');
  const code = `export default { fetch(request) {
    console.log('run says hi');
    if (request.url.endsWith('/throw')) throw new RangeError('run failed');
    return new Response('done');
  } };`;
  try {
    await waitFor(async () => {
      const r = await node.control('POST', '/v1/run', { body: { modules: { 'run.js': code }, tail_id: 'job-1' } });
      assert.equal(r.status, 200, r.text);
      return tail.lines.some((l) => l.type === 'request');
    }, { timeout: 10000, what: 'a run request line' });
    const log = await tail.waitLine((l) => l.type === 'log');
    assert.equal(log.message, 'run says hi');
    const req = await tail.waitLine((l) => l.type === 'request');
    assert.equal(req.status, 200);
    assert.equal(req.outcome, 'ok');
    assert.equal(req.sandbox, 'run');
    await node.control('POST', '/v1/run', {
      body: { modules: { 'run.js': code }, tail_id: 'job-1', request: { url: 'https://x.example/throw' } },
    });
    const ex = await tail.waitLine((l) => l.type === 'exception');
    assert.match(ex.message, /RangeError: run failed/);
    // Another run's lines do not come here.
    await node.control('POST', '/v1/run', { body: { modules: { 'run.js': code }, tail_id: 'job-2' } });
    await node.control('POST', '/v1/run', { body: { modules: { 'run.js': code } } });
    const runs = tail.lines.filter((l) => l.type === 'request').length;
    await sleep(100);
    assert.equal(tail.lines.filter((l) => l.type === 'request').length, runs);
  } finally {
    tail.close();
  }
});

test('a reader that stops reading loses lines, counted, and the tenant is not slowed', async () => {
  // A raw connection that is never read while the tenant floods its tail.
  const sock = net.connect(node.controlPort, '127.0.0.1');
  await new Promise((resolve) => sock.on('connect', resolve));
  let got = '';
  sock.on('data', (d) => { got += d.toString('latin1'); });
  sock.write(`GET /v1/workers/logs/tail HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${node.token}\r\n\r\n`);
  await waitFor(() => got.includes('"attached"'), { what: 'the attached line' });
  const watcher = await openTail('/v1/workers/logs/tail');
  try {
    await untilSeen(watcher, 'logs', '/warm-flood');
    sock.pause();
    const results = [];
    for (let i = 0; i < 60; i++) results.push((await node.ingress('logs', '/flood')).status);
    assert.deepEqual(results, new Array(60).fill(200));
    // ~48 MB of lines went to a reader taking none: most were dropped.
    const m = await node.control('GET', '/metrics');
    const dropped = Number(/^edgenode_tail_dropped_lines_total (\d+)/m.exec(m.text)?.[1]);
    assert.ok(dropped > 0, 'dropped lines are counted');
    got = '';
    sock.resume();
    // Once the reader caught up, lines flow again, after a notice of the loss.
    await waitFor(async () => {
      await node.ingress('logs', '/after');
      return got.includes('hello from /after');
    }, { timeout: 30000, what: 'lines after the reader caught up' });
    const notice = /\{"type":"dropped","count":(\d+)[,}]/.exec(got);
    assert.ok(notice && Number(notice[1]) > 0, 'a dropped notice came before');
    assert.ok(got.indexOf('"type":"dropped"') < got.indexOf('hello from /after'));
  } finally {
    sock.destroy();
    watcher.close();
  }
});

test("a cordoned tenant's dedicated process sends its lines too", async () => {
  await node.deployOk('alone', 'export default { fetch(r) { console.log("alone at", new URL(r.url).pathname); return new Response("a"); } };');
  const tail = await openTail('/v1/workers/alone/tail');
  try {
    const c = await node.control('POST', '/v1/tenants/alone/cordon', { body: { reason: 'tail test' } });
    assert.equal(c.status, 200, c.text);
    const t = await dedicatedReady(node, 'alone');
    await waitFor(async () => {
      await node.ingress('alone', '/dedicated');
      return tail.lines.some((l) => l.type === 'request' && l.url.endsWith('/dedicated') &&
        l.worker_process === t.dedicated.worker);
    }, { timeout: 20000, what: `a request line from the dedicated process ${JSON.stringify(t.dedicated)}` });
    await tail.waitLine((l) => l.type === 'log' && l.message === 'alone at /dedicated');
  } finally {
    tail.close();
  }
});

test('edgectl tail prints human lines, and --json the lines themselves', async () => {
  const env = { ...process.env, EDGENODE_NODE: `http://127.0.0.1:${node.controlPort}`, EDGENODE_TOKEN_FILE: node.tokenFile };
  for (const json of [false, true]) {
    const args = ['tail', 'logs', ...(json ? ['--json'] : [])];
    const proc = spawn(EDGECTL, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => { out += d; });
    proc.stderr.on('data', (d) => { err += d; });
    try {
      await waitFor(async () => {
        await node.ingress('logs', '/cli');
        // The request line comes last of a request's lines.
        return json ? /"type":"request"[^\n]*\/cli"/.test(out) : /GET \S+\/cli 200/.test(out);
      }, { timeout: 15000, what: `edgectl ${args.join(' ')} output (stderr: ${err})` });
      if (json) {
        const lines = out.trim().split('\n').map((l) => JSON.parse(l));
        assert.ok(lines.some((l) => l.type === 'request' && l.status === 200));
      } else {
        assert.match(out, /GET \S+\/cli 200 ok/);
        assert.match(out, /hello from \/cli/);
      }
    } finally {
      proc.kill('SIGTERM');
    }
  }
  const bad = spawn(EDGECTL, ['tail', 'nosuch'], { env });
  let msg = '';
  bad.stderr.on('data', (d) => { msg += d; });
  const code = await new Promise((resolve) => bad.on('exit', resolve));
  assert.notEqual(code, 0);
  assert.match(msg, /unknown worker/);
});

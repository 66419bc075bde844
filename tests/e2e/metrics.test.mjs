// GET /metrics: Prometheus text format, checked by promtool and scraped by a
// real Prometheus server (both from Debian's `prometheus` package).
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { test } from 'node:test';
import { missingInput, sleep, startNode, tempDir, waitFor, writeFile } from './lib/node.mjs';

const OK = `export default { fetch() { return new Response('ok'); } };\n`;
const SPIN = `export default { fetch() { while (true) {} } };\n`;
const OOPS = `export default { fetch() { throw new Error('oops'); } };\n`;

// {name: {type, help, samples: [{labels: {}, value}]}}; throws on a line that
// is not in the text format.
function parseMetrics(text) {
  const families = {};
  const family = (name) => (families[name] ??= { samples: [] });
  for (const line of text.split('\n')) {
    if (line === '') continue;
    let m;
    if ((m = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$/.exec(line))) {
      family(m[2])[m[1] === 'HELP' ? 'help' : 'type'] = m[3];
      continue;
    }
    m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${JSON.stringify(line)}`);
    const labels = {};
    if (m[2]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?/g;
      let l;
      let used = 0;
      while ((l = re.exec(m[2]))) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
        used = re.lastIndex;
      }
      if (used !== m[2].length) throw new Error(`bad labels: ${line}`);
    }
    const value = Number(m[3]);
    if (Number.isNaN(value)) throw new Error(`bad value: ${line}`);
    family(m[1]).samples.push({ labels, value });
  }
  return families;
}

function value(families, name, labels = {}) {
  const f = families[name];
  if (!f) return undefined;
  const s = f.samples.find((x) => Object.entries(labels).every(([k, v]) => x.labels[k] === v));
  return s?.value;
}

function which(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { encoding: 'utf8' }).status === 0;
}

test('GET /metrics: per-tenant, per-process and node metrics in the text format', async (t) => {
  const node = await startNode({ workers: 2 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('ok', OK);
  await node.deployOk('spin', SPIN, { json: true, limits: { cpu_ms: 20 } });
  await node.deployOk('oops', OOPS);
  for (let i = 0; i < 6; i++) assert.equal((await node.ingress('ok', '/')).status, 200);
  assert.equal((await node.ingress('spin', '/')).status, 503);
  assert.equal((await node.ingress('oops', '/')).status, 500);
  await waitFor(async () => (await node.control('GET', '/v1/tenants/spin')).json.cpu_limit_hits === 1 &&
    (await node.control('GET', '/v1/tenants/oops')).json.errors === 1 &&
    (await node.control('GET', '/v1/tenants/ok')).json.requests === 6, { what: 'statistics' });

  assert.equal((await node.control('GET', '/metrics', { token: null })).status, 401, 'the token is needed');
  assert.equal((await node.control('GET', '/metrics', { token: 'wrong' })).status, 401);
  assert.equal((await node.control('POST', '/metrics')).status, 405);
  const r = await node.control('GET', '/metrics');
  assert.equal(r.status, 200);
  assert.equal(r.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  const m = parseMetrics(r.text);

  for (const [name, f] of Object.entries(m)) {
    // a histogram's samples are NAME_bucket, NAME_sum and NAME_count under NAME's HELP and TYPE
    const base = name.replace(/_(bucket|sum|count)$/, '');
    if (base !== name && m[base]?.type === 'histogram') continue;
    assert.ok(f.help && f.type, `${name} has HELP and TYPE`);
    if (f.type === 'counter') assert.match(name, /_total$/, `counter ${name} ends with _total`);
    assert.match(name, /^edgenode_/);
  }
  const info = await node.nodeInfo();
  assert.equal(value(m, 'edgenode_build_info', { version: info.version, v8: info.v8 }), 1);
  assert.ok(value(m, 'edgenode_uptime_seconds') > 0);
  // The CPU decides (PKU or not); /metrics, /v1/node and every process agree.
  assert.equal(typeof info.mpk_enabled, 'boolean');
  assert.equal(value(m, 'edgenode_mpk_enabled'), info.mpk_enabled ? 1 : 0);
  for (const w of info.workers.filter((x) => x.state === 'ready')) {
    assert.equal(typeof w.mpk?.enabled, 'boolean', JSON.stringify(w));
    assert.equal(w.mpk.enabled, info.mpk_enabled);
    if (w.mpk.enabled) assert.ok(w.mpk.keys > 0);
  }
  assert.equal(value(m, 'edgenode_node_state', { state: 'serving' }), 1);
  assert.equal(value(m, 'edgenode_node_state', { state: 'drained' }), 0);

  assert.equal(value(m, 'edgenode_tenant_requests_total', { tenant: 'ok' }), 6);
  assert.equal(value(m, 'edgenode_tenant_errors_total', { tenant: 'ok' }), 0);
  assert.equal(value(m, 'edgenode_tenant_errors_total', { tenant: 'oops' }), 1);
  assert.equal(value(m, 'edgenode_tenant_limit_hits_total', { tenant: 'spin', kind: 'cpu' }), 1);
  assert.equal(value(m, 'edgenode_tenant_limit_hits_total', { tenant: 'spin', kind: 'memory' }), 0);
  assert.equal(value(m, 'edgenode_tenant_limit_hits_total', { tenant: 'ok', kind: 'wall' }), 0);
  assert.ok(value(m, 'edgenode_tenant_cpu_seconds_total', { tenant: 'spin' }) >= 0.015, 'CPU seconds, not ms');
  assert.ok(value(m, 'edgenode_tenant_heap_bytes', { tenant: 'ok' }) > 0);
  assert.ok(value(m, 'edgenode_tenant_cold_starts_total', { tenant: 'ok' }) >= 1);
  for (const tenant of ['ok', 'spin', 'oops']) assert.equal(value(m, 'edgenode_tenant_cordoned', { tenant }), 0);

  const cold = m.edgenode_worker_cold_starts_total.samples.reduce((a, s) => a + s.value, 0);
  assert.ok(cold >= 3, `cold starts summed over processes: ${cold}`);
  for (const worker of ['1', '2']) {
    assert.equal(value(m, 'edgenode_worker_up', { worker }), 1);
    assert.equal(value(m, 'edgenode_worker_restarts_total', { worker }), 0);
    assert.ok(value(m, 'edgenode_worker_resident_memory_bytes', { worker }) > 1e6);
    assert.ok(value(m, 'edgenode_worker_isolates', { worker }) >= 0);
    assert.ok(value(m, 'edgenode_worker_evictions_total', { worker }) >= 0);
  }

  // a crash shows as a restart; the tenant counters survive it
  node.allowCrashes = true;
  const victim = info.workers[0];
  process.kill(victim.pid, 'SIGKILL');
  await waitFor(async () => {
    const w = (await node.nodeInfo()).workers[0];
    return w.pid !== victim.pid && w.state === 'ready';
  }, { what: 'the restart' });
  const m2 = parseMetrics((await node.control('GET', '/metrics')).text);
  assert.equal(value(m2, 'edgenode_worker_restarts_total', { worker: String(victim.id) }), 1);
  assert.equal(value(m2, 'edgenode_tenant_requests_total', { tenant: 'ok' }), 6);
  assert.ok(m2.edgenode_worker_cold_starts_total.samples.reduce((a, s) => a + s.value, 0) >= cold,
    'per-slot counters do not go back when a process is replaced');

  if (!which('promtool')) {
    t.diagnostic('promtool missing (Debian package prometheus): not linted');
    return;
  }
  const lint = spawnSync('promtool', ['check', 'metrics'], { input: r.text, encoding: 'utf8' });
  assert.equal(lint.status, 0, `promtool check metrics:\n${lint.stdout}${lint.stderr}`);
  assert.equal(`${lint.stdout}${lint.stderr}`.trim(), '', 'no lint findings');
});

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function promQuery(port, query) {
  const res = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(query)}`);
  const body = await res.json();
  if (body.status !== 'success') throw new Error(JSON.stringify(body));
  return body.data.result;
}

// A parent whose ?child= picks a child that answers, throws, spins or does not compile.
const PARENT = `
const children = {
  ok: 'export default { fetch() { return new Response("child ok"); } };',
  throws: 'export default { fetch() { throw new Error("child oops"); } };',
  spins: 'export default { fetch() { while (true) {} } };',
  broken: 'export default { fetch() {',
};
export default {
  async fetch(request, env) {
    const which = new URL(request.url).searchParams.get('child');
    const stub = env.LOADER.load({ compatibilityDate: '2025-06-01', mainModule: 'c.js',
      modules: { 'c.js': children[which] }, limits: { cpuMs: 20 } });
    try {
      return new Response(await (await stub.getEntrypoint().fetch('http://child/')).text());
    } catch (e) {
      return new Response('child failed: ' + e.message, { status: 502 });
    }
  }
};
`;
const STATUS = `export default { fetch(req) {
  return new Response('s', { status: Number(new URL(req.url).searchParams.get('s')) });
} };\n`;

test('/metrics counts runs and loader requests by outcome, cold starts by kind, responses by class and per-tenant durations', async (t) => {
  const node = await startNode({ workers: 1, extraArgs: ['--metrics-max-tenants', '2'] });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('status', STATUS);
  await node.deployOk('parent', PARENT, { json: true, bindings: { LOADER: { type: 'loader' } } });
  for (const s of [200, 200, 201, 302, 404, 503]) {
    assert.equal((await node.ingress('status', `/?s=${s}`)).status, s);
  }
  const outcomes = { ok: 'child ok', throws: 'child failed', spins: 'child failed', broken: 'child failed' };
  for (const [child, text] of Object.entries(outcomes)) {
    const r = await node.ingress('parent', `/?child=${child}`);
    assert.ok(r.text.startsWith(text), `${child}: ${r.status} ${r.text}`);
  }
  const run = (body) => node.control('POST', '/v1/run', { body });
  const code = (src) => ({ modules: { 'index.js': src } });
  assert.equal((await run(code(OK))).status, 200);
  assert.equal((await run(code(OK))).status, 200);
  assert.equal((await run(code(OOPS))).status, 500);
  assert.equal((await run(code('export default {'))).status, 400);
  assert.equal((await run({ ...code(SPIN), limits: { cpu_ms: 10 } })).status, 503);
  assert.equal((await run({ modules: {} })).status, 400);
  // three more tenants: past --metrics-max-tenants 2, their durations go to "other"
  for (const name of ['extra-a', 'extra-b', 'other']) {
    await node.deployOk(name, OK);
    assert.equal((await node.ingress(name, '/')).text, 'ok');
  }

  let m;
  await waitFor(async () => {
    m = parseMetrics((await node.control('GET', '/metrics')).text);
    return value(m, 'edgenode_responses_total', { class: '2xx' }) === 3 + 1 + 3 &&
      value(m, 'edgenode_loader_requests_total', { outcome: 'start_error' }) === 1 &&
      m.edgenode_tenant_request_duration_seconds_count?.samples
        .reduce((sum, x) => sum + x.value, 0) === 6 + 4 + 3;
  }, { timeout: 10000, what: 'the worker process reports in /metrics' }).catch((e) => {
    const lines = Object.entries(m).filter(([k]) => /responses|loader_req|duration_seconds_count/.test(k));
    throw new Error(`${e.message}: ${JSON.stringify(lines)}`);
  });

  assert.equal(m.edgenode_run_requests_total.type, 'counter');
  const runs = (o) => value(m, 'edgenode_run_requests_total', { outcome: o });
  assert.deepEqual([runs('ok'), runs('exception'), runs('rejected'), runs('cpu'), runs('bad_request')],
    [2, 1, 1, 1, 1]);
  const loads = (o) => value(m, 'edgenode_loader_requests_total', { outcome: o });
  assert.deepEqual([loads('ok'), loads('exception'), loads('cpu'), loads('start_error'), loads('wall')],
    [1, 1, 1, 1, 0]);
  const cold = (k) => value(m, 'edgenode_cold_starts_total', { kind: k });
  assert.equal(cold('worker'), 5, 'status, parent, extra-a, extra-b, other');
  assert.ok(cold('loader') >= 3, `loader cold starts: ${cold('loader')}`); // the broken one never got an isolate
  assert.ok(cold('run') >= 3, `run cold starts: ${cold('run')}`);
  const cls = (c) => value(m, 'edgenode_responses_total', { class: c });
  assert.deepEqual([cls('2xx'), cls('3xx'), cls('4xx'), cls('5xx')], [3 + 1 + 3, 1, 1, 1 + 3]);

  const h = m.edgenode_tenant_request_duration_seconds;
  assert.equal(h.type, 'histogram');
  // two tenants (the first two the supervisor heard of) have their own series, the rest are "other"
  const series = m.edgenode_tenant_request_duration_seconds_count.samples.map((x) => x.labels.tenant);
  assert.equal(series.length, 3, series.join());
  assert.ok(series.includes('other'));
  const timed = { status: 6, parent: 4, 'extra-a': 1, 'extra-b': 1, other: 1 };
  const own = series.filter((x) => x !== 'other');
  for (const name of own) {
    assert.equal(value(m, 'edgenode_tenant_request_duration_seconds_count', { tenant: name }), timed[name]);
    const buckets = m.edgenode_tenant_request_duration_seconds_bucket.samples.filter((x) => x.labels.tenant === name);
    assert.equal(buckets.length, 15);
    assert.equal(buckets[14].labels.le, '+Inf');
    assert.equal(buckets[14].value, timed[name]);
    for (let i = 1; i < buckets.length; i++) assert.ok(buckets[i].value >= buckets[i - 1].value, 'cumulative');
    assert.ok(value(m, 'edgenode_tenant_request_duration_seconds_sum', { tenant: name }) > 0);
  }
  assert.equal(value(m, 'edgenode_tenant_request_duration_seconds_count', { tenant: 'other' }),
    13 - timed[own[0]] - timed[own[1]]);

  if (which('promtool')) {
    const text = (await node.control('GET', '/metrics')).text;
    const lint = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(lint.status, 0, `promtool check metrics:\n${lint.stdout}${lint.stderr}`);
  }
});

test('a real Prometheus server scrapes /metrics with the bearer token', async (t) => {
  if (!which('prometheus')) {
    return missingInput(t, 'prometheus is missing', 'install the Debian package prometheus (deploy/setup.sh does)');
  }
  const node = await startNode({ workers: 1 });
  t.after(() => node.stop({ clean: true }));
  await node.deployOk('ok', OK);
  for (let i = 0; i < 3; i++) await node.ingress('ok', '/');
  await waitFor(async () => (await node.control('GET', '/v1/tenants/ok')).json.requests === 3, { what: 'statistics' });

  const dir = tempDir('edgenode-prom-');
  const config = writeFile(dir, 'prometheus.yml', [
    'global:',
    '  scrape_interval: 1s',
    '  evaluation_interval: 1s',
    'scrape_configs:',
    '  - job_name: edgenode',
    '    scrape_interval: 1s',
    '    authorization:',
    '      type: Bearer',
    `      credentials_file: ${node.tokenFile}`,
    '    static_configs:',
    `      - targets: ['127.0.0.1:${node.controlPort}']`,
    '',
  ].join('\n'));
  const port = await freePort();
  const prom = spawn('prometheus', [
    `--config.file=${config}`, `--storage.tsdb.path=${path.join(dir, 'tsdb')}`,
    `--web.listen-address=127.0.0.1:${port}`, '--log.level=warn',
  ], { stdio: ['ignore', 'ignore', 'pipe'] });
  let promLog = '';
  prom.stderr.on('data', (d) => { promLog += d; });
  const promExit = new Promise((resolve) => prom.on('exit', resolve));
  t.after(async () => {
    prom.kill('SIGTERM');
    await Promise.race([promExit, sleep(5000)]);
    prom.kill('SIGKILL');
  });

  let result;
  try {
    result = await waitFor(async () => {
      const r = await promQuery(port, 'edgenode_build_info');
      return r.length ? r : null;
    }, { timeout: 30000, interval: 250, what: 'edgenode_build_info in Prometheus' });
  } catch (err) {
    err.message += `\nprometheus said:\n${promLog.slice(-2000)}`;
    throw err;
  }
  const info = await node.nodeInfo();
  assert.equal(result[0].metric.version, info.version);
  assert.equal(result[0].metric.v8, info.v8);
  assert.equal(result[0].value[1], '1');
  const up = await promQuery(port, 'up{job="edgenode"}');
  assert.equal(up[0].value[1], '1', 'the scrape succeeded');
  const requests = await promQuery(port, 'edgenode_tenant_requests_total{tenant="ok"}');
  assert.equal(requests[0].value[1], '3');
});

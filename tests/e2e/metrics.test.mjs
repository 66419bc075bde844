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

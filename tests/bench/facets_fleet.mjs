// Replicated facet writes (run by tests/bench/facets_fleet.sh): the same
// worker on a node alone and on a node of a fleet (three NATS servers, R=3),
// same run, same machine. Each request is one insert (one commit).
//   - latency: ONE client, keep-alive, WRITES requests each: p50 and p99,
//     and the fleet's added p50;
//   - throughput: CLIENTS concurrent clients for DURATION s on one facet;
//   - failover: SIGKILL of the owner's process group until a second node
//     serves the tenant, with the lease LEASE_MS, FAILOVERS times.
import http from 'node:http';

import { startNode } from '../e2e/lib/node.mjs';
import { sleep, startFleetNode, startNats, waitFor } from '../fleet/lib/fleet.mjs';

const WRITES = Number(process.env.WRITES ?? 2000);
const CLIENTS = Number(process.env.CLIENTS ?? 16);
const DURATION = Number(process.env.DURATION ?? 5);
const FAILOVERS = Number(process.env.FAILOVERS ?? 3);
const LEASE_MS = Number(process.env.LEASE_MS ?? 2000);

const WORKER = `export default { async fetch(req, env) {
  env.DB.exec("CREATE TABLE IF NOT EXISTS w (id INTEGER PRIMARY KEY, v TEXT)");
  if (req.method === "POST") { env.DB.exec("INSERT INTO w (v) VALUES (?)", "x"); return new Response("ok"); }
  return new Response(String(env.DB.exec("SELECT count(*) AS n FROM w").one().n));
} };`;
const SPEC = { json: true, bindings: { DB: { type: 'facet' } } };
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function post(port, host, method = 'POST') {
  return new Promise((resolve) => {
    const started = process.hrtime.bigint();
    const req = http.request({ port, host: '127.0.0.1', method, path: '/', agent, headers: { host }, timeout: 10000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text, ms: Number(process.hrtime.bigint() - started) / 1e6 }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ error: err.message }));
    req.end();
  });
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function latency(port, host) {
  for (let i = 0; i < 200; i++) await post(port, host); // warm
  const ms = [];
  for (let i = 0; i < WRITES; i++) {
    const r = await post(port, host);
    if (r.status !== 200) throw new Error(`write failed: ${JSON.stringify(r)}`);
    ms.push(r.ms);
  }
  ms.sort((a, b) => a - b);
  return { p50: pct(ms, 50), p99: pct(ms, 99) };
}

async function throughput(port, host) {
  let ok = 0;
  let running = true;
  const loops = Array.from({ length: CLIENTS }, async () => {
    while (running) if ((await post(port, host)).status === 200) ok++;
  });
  await sleep(DURATION * 1000);
  running = false;
  await Promise.all(loops);
  return ok / DURATION;
}

const nats = await startNats(3);
const alone = await startNode({ workers: 1 });
const fleet = [];
for (let i = 1; i <= 3; i++) {
  fleet.push(await startFleetNode(`bench${i}`, nats, { extraArgs: ['--facet-lease-ms', String(LEASE_MS)] }));
}
await waitFor(async () => (await fleet[0].control('GET', '/v1/fleet')).json?.nodes?.filter((m) => m.alive).length === 3,
  { timeout: 20000, what: 'fleet up' });
try {
  await alone.deployOk('w', WORKER, SPEC);
  await fleet[0].deployOk('w', WORKER, SPEC);
  const a = await latency(alone.listenPort, 'w.localhost');
  const f = await latency(fleet[0].listenPort, 'w.localhost');
  console.log(`latency of one write (1 client, ${WRITES} writes): alone p50 ${a.p50.toFixed(3)} ms ` +
    `p99 ${a.p99.toFixed(3)} ms; replicated p50 ${f.p50.toFixed(3)} ms p99 ${f.p99.toFixed(3)} ms; ` +
    `added p50 ${(f.p50 - a.p50).toFixed(3)} ms`);
  const ta = await throughput(alone.listenPort, 'w.localhost');
  const tf = await throughput(fleet[0].listenPort, 'w.localhost');
  console.log(`writes/s on one facet (${CLIENTS} clients, ${DURATION} s): alone ${ta.toFixed(0)}, ` +
    `replicated ${tf.toFixed(0)} (${(tf / ta).toFixed(2)}x)`);
  const times = [];
  let owner = 0;
  for (let k = 0; k < FAILOVERS; k++) {
    const next = (owner + 1) % 3;
    await fleet[owner].kill();
    const at = Date.now();
    await waitFor(async () => (await post(fleet[next].listenPort, 'w.localhost', 'GET')).status === 200,
      { timeout: 30000, interval: 20, what: 'served after failover' });
    times.push(Date.now() - at);
    fleet[owner] = await startFleetNode(`bench${owner + 1}`, nats, {
      dataDir: fleet[owner].dataDir, extraArgs: ['--facet-lease-ms', String(LEASE_MS)],
    });
    owner = next;
    await sleep(1000);
  }
  times.sort((x, y) => x - y);
  console.log(`failover after SIGKILL of the owner (lease ${LEASE_MS} ms, ${FAILOVERS} kills): ` +
    `median ${pct(times, 50)} ms, max ${times[times.length - 1]} ms`);
} finally {
  agent.destroy();
  for (const n of [alone, ...fleet]) await n.stop().catch(() => {});
  await nats.stop();
}

// The fleet benchmark's driver (run by tests/bench/fleet.sh): the fleet
// tests' own harness, timed.
import { spawnSync } from 'node:child_process';
import http from 'node:http';

import { sleep, startFleetNode, startHaproxy, startNats, waitFor } from '../fleet/lib/fleet.mjs';

const DEPLOYS = Number(process.env.DEPLOYS ?? 100);
const FAILOVERS = Number(process.env.FAILOVERS ?? 3);
const DURATION = Number(process.env.DURATION ?? 10);

const worker = (v) => `export default { fetch() { return new Response("v${v}"); } };`;
const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });

function get(port, host) {
  return new Promise((resolve) => {
    const req = http.get({ port, host: '127.0.0.1', path: '/', agent, headers: { host }, timeout: 5000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ error: err.message }));
  });
}

const pct = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
const ms = (x) => `${x.toFixed(1)} ms`;

async function ready(n) {
  await waitFor(async () => (await n.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 30000, what: 'ready' });
}

async function deployToServed(nodes) {
  const times = [];
  for (let v = 1; v <= DEPLOYS; v++) {
    const r = await nodes[0].deploy('prop', worker(v));
    if (r.status !== 200 && r.status !== 201) throw new Error(`deploy: ${r.status} ${r.text}`);
    const t0 = process.hrtime.bigint();
    await Promise.all(nodes.map(async (n) => {
      for (;;) {
        const a = await get(n.listenPort, 'prop.localhost');
        if (a.status === 200 && a.text === `v${v}`) return;
        await new Promise((resolve) => setImmediate(resolve));
      }
    }));
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  times.sort((a, b) => a - b);
  console.log(`deploy answered -> served on all 3 nodes, ${DEPLOYS} deploys: ` +
    `p50 ${ms(pct(times, 50))}, p99 ${ms(pct(times, 99))}, max ${ms(times[times.length - 1])}`);
}

function wrk(port, host) {
  const r = spawnSync('wrk', ['-t2', '-c64', `-d${DURATION}s`, '-H', `Host: ${host}`, `http://127.0.0.1:${port}/`],
    { encoding: 'utf8' });
  const m = /Requests\/sec:\s+([\d.]+)/.exec(r.stdout);
  if (!m) throw new Error(`wrk: ${r.stdout}${r.stderr}`);
  return Number(m[1]);
}

async function failover(nats) {
  const detect = [];
  const failedCounts = [];
  for (let i = 0; i < FAILOVERS; i++) {
    const nodes = [];
    for (let k = 1; k <= 3; k++) nodes.push(await startFleetNode(`f${i}n${k}`, nats));
    await Promise.all(nodes.map(ready));
    const hp = await startHaproxy(nodes, { checkInter: '1s' });
    await nodes[0].deployOk('fo', worker(0));
    await waitFor(async () => Object.values(await hp.serverStates()).every((s) => s === 'UP'),
      { timeout: 10000, what: 'all UP' });
    let running = true;
    let failed = 0;
    const loops = Array.from({ length: 8 }, async () => {
      while (running) {
        const r = await get(hp.port, 'fo.localhost');
        if (r.error || r.status !== 200) failed++;
      }
    });
    await sleep(2000);
    const counts = await Promise.all(nodes.map(async (n) =>
      (await n.control('GET', '/v1/tenants')).json.tenants.find((x) => x.name === 'fo')?.requests ?? 0));
    const victim = counts.indexOf(Math.max(...counts));
    nodes[victim].allowCrashes = true;
    const t0 = Date.now();
    await nodes[victim].kill();
    let down = 0;
    while (!down) {
      const s = await hp.serverStates();
      if (s[`node${victim + 1}`] !== 'UP') down = Date.now() - t0;
      else await sleep(20);
    }
    await sleep(1000);
    running = false;
    await Promise.all(loops);
    detect.push(down);
    failedCounts.push(failed);
    await hp.stop();
    for (const n of nodes) await n.stop().catch(() => {});
  }
  console.log(`failover after SIGKILL (checks 1 s, fall 2), ${FAILOVERS} kills: marked down after ` +
    `${detect.map((d) => `${d} ms`).join(', ')}; requests failed: ${failedCounts.join(', ')}`);
}

const nats = await startNats(3);
try {
  const nodes = [];
  for (let k = 1; k <= 3; k++) nodes.push(await startFleetNode(`b${k}`, nats, { workers: 2 }));
  await Promise.all(nodes.map(ready));
  await deployToServed(nodes);
  const hp = await startHaproxy(nodes, { checkInter: '1s' });
  await nodes[0].deployOk('tp', 'export default { fetch() { return new Response("hello"); } };');
  await waitFor(async () => Object.values(await hp.serverStates()).every((s) => s === 'UP'),
    { timeout: 10000, what: 'all UP' });
  await waitFor(async () => (await get(hp.port, 'tp.localhost')).status === 200, { what: 'tp served' });
  // the node HAProxy hashes tp.localhost to is measured directly too
  const direct = wrk(nodes[0].listenPort, 'tp.localhost');
  const through = wrk(hp.port, 'tp.localhost');
  console.log(`throughput, wrk -t2 -c64 -d${DURATION}s: one node directly ${direct.toFixed(0)} req/s, ` +
    `through HAProxy ${through.toFixed(0)} req/s (${(through / direct).toFixed(2)}x)`);
  await hp.stop();
  for (const n of nodes) await n.stop().catch(() => {});
  await failover(nats);
} finally {
  agent.destroy();
  await nats.stop();
}

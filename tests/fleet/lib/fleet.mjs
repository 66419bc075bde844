// The fleet tests' harness: a real NATS JetStream cluster (Debian's
// nats-server), real edgenode nodes joined to it, and a real HAProxy in
// front of them with the project's own deploy/fleet/haproxy.cfg, all on
// loopback ports, started and stopped by the tests.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';

import { SOURCE_DIR, sleep, startNode, tempDir, waitFor } from '../../e2e/lib/node.mjs';

export { sleep, waitFor };

const live = new Set();
process.on('exit', () => {
  for (const p of live) {
    try { process.kill(-p.pid, 'SIGKILL'); } catch { /* gone */ }
  }
});

function findProgram(name) {
  for (const dir of [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/usr/bin']) {
    const file = path.join(dir, name);
    if (dir && existsSync(file)) return file;
  }
  throw new Error(`${name} is not installed (deploy/setup.sh installs it)`);
}

// A free loopback port below the kernel's ephemeral range, so that no
// outgoing connection takes it between this check and the server's bind.
const taken = new Set();
export async function freePort() {
  for (let i = 0; i < 1000; i++) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    if (taken.has(port)) continue;
    const ok = await new Promise((resolve) => {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    });
    if (ok) {
      taken.add(port);
      return port;
    }
  }
  throw new Error('no free port');
}

function spawnLogged(file, args, logFile, env = {}) {
  const out = [];
  const proc = spawn(file, args, { stdio: ['ignore', 'pipe', 'pipe'], detached: true, env: { ...process.env, ...env } });
  const keep = (b) => {
    out.push(b.toString());
    // the directory goes with stop(); a server's last words may come after
    try { if (logFile) writeFileSync(logFile, b, { flag: 'a' }); } catch { /* gone */ }
  };
  proc.stdout.on('data', keep);
  proc.stderr.on('data', keep);
  proc.exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  proc.output = () => out.join('');
  live.add(proc);
  proc.on('exit', () => live.delete(proc));
  return proc;
}

async function waitListening(port, { timeout = 10000, what = `port ${port}` } = {}) {
  await waitFor(() => new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1');
    c.once('connect', () => { c.destroy(); resolve(true); });
    c.once('error', () => resolve(false));
  }), { timeout, what });
}

// Three (or n) nats-server processes clustered with JetStream on, each with
// its monitoring port. config: text of a configuration file every server
// reads (TLS, authorization), the flags still giving names and ports;
// scheme: what the nodes' URLs start with; args: more flags for each server.
export async function startNats(n = 3, { config, scheme = 'nats', args: extra = [] } = {}) {
  const bin = findProgram('nats-server');
  const dir = tempDir('edgenode-fleet-nats-');
  const servers = [];
  for (let i = 0; i < n; i++) {
    servers.push({ name: `n${i}`, port: await freePort(), cport: await freePort(), mport: await freePort() });
  }
  const configFile = path.join(dir, 'nats.conf');
  if (config) writeFileSync(configFile, config);
  const cluster = {
    dir,
    servers,
    urls: servers.map((s) => `${scheme}://127.0.0.1:${s.port}`).join(','),
    start(i) {
      const s = servers[i];
      const routes = servers.filter((o) => o !== s).map((o) => `nats-route://127.0.0.1:${o.cport}`).join(',');
      mkdirSync(path.join(dir, s.name), { recursive: true });
      const args = ['-n', s.name, '-a', '127.0.0.1', '-p', String(s.port), '-m', String(s.mport), '-js',
        '-sd', path.join(dir, s.name)];
      if (config) args.push('-c', configFile);
      args.push(...extra);
      if (n > 1) args.push('--cluster_name', 'edge', '-cluster', `nats://127.0.0.1:${s.cport}`, '-routes', routes);
      s.proc = spawnLogged(bin, args, path.join(dir, `${s.name}.log`));
      return waitListening(s.port, { what: `nats-server ${s.name}` });
    },
    // The index of the server that leads the stream now, as the monitoring
    // endpoint of any live server says (-1 while none does).
    async streamLeader(stream) {
      for (const s of servers) {
        if (!s.proc || s.proc.exitCode !== null || s.proc.signalCode !== null) continue;
        try {
          const r = await fetch(`http://127.0.0.1:${s.mport}/jsz?streams=true`);
          const j = await r.json();
          for (const a of j.account_details ?? []) {
            for (const d of a.stream_detail ?? []) {
              const leader = d.name === stream ? d.cluster?.leader : undefined;
              if (leader) return servers.findIndex((o) => o.name === leader);
            }
          }
        } catch { /* the next server may answer */ }
      }
      return -1;
    },
    async kill(i, signal = 'SIGKILL') {
      const s = servers[i];
      if (!s.proc || s.proc.exitCode !== null || s.proc.signalCode !== null) return;
      s.proc.kill(signal);
      await s.proc.exited;
    },
    async stop() {
      await Promise.all(servers.map((_, i) => cluster.kill(i, 'SIGTERM')));
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await Promise.all(servers.map((_, i) => cluster.start(i)));
  return cluster;
}

// An edgenode joined to the fleet as `name`.
export function startFleetNode(name, nats, {
  extraArgs = [], dataDir, workers = 1, readyTimeout, listen, control,
} = {}) {
  return startNode({
    workers, dataDir, readyTimeout, listen, control,
    extraArgs: ['--fleet', nats.urls, '--node-name', name, ...extraArgs],
  });
}

// Once the node's /readyz answers 200.
export async function waitReady(node) {
  await waitFor(async () => (await node.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 20000, what: 'ready' });
}

// What a node serves for the worker at /, as "STATUS TEXT" (or "error
// MESSAGE"): what convergence tests wait for.
export async function servedBody(node, name) {
  try {
    const r = await node.ingress(name, '/', { timeout: 3000 });
    return `${r.status} ${r.text}`;
  } catch (err) {
    return `error ${err.message}`;
  }
}

// Once every node sees all of them alive (their heartbeats): forwards can go.
export async function waitMembers(nodes) {
  await waitFor(async () => {
    const all = await Promise.all(nodes.map((n) => n.control('GET', '/v1/fleet')));
    return all.every((r) => r.json?.nodes?.filter((m) => m.alive).length === nodes.length);
  }, { timeout: 20000, what: `every node sees the ${nodes.length}` });
}

// Which node owns the tenant's facets: the one whose /v1/fleet lists it
// (-1: none; null entries are skipped).
export async function ownerIndex(nodes, tenant) {
  for (let i = 0; i < nodes.length; i++) {
    if (!nodes[i]) continue;
    const r = await nodes[i].control('GET', '/v1/fleet').catch(() => null);
    if (r?.json?.facets?.includes(tenant)) return i;
  }
  return -1;
}

// HAProxy with deploy/fleet/haproxy.cfg in front of three nodes, plus an
// admin socket (a second config file) that tells which servers it sees up.
export async function startHaproxy(nodes, { checkInter = '1s' } = {}) {
  const bin = findProgram('haproxy');
  const dir = tempDir('edgenode-fleet-haproxy-');
  const port = await freePort();
  const sock = path.join(dir, 'admin.sock');
  const extra = path.join(dir, 'admin.cfg');
  writeFileSync(extra, `global\n  stats socket ${sock} level admin\n`);
  const env = { EDGENODE_FRONTEND: `127.0.0.1:${port}`, EDGENODE_CHECK_INTER: checkInter };
  nodes.forEach((n, i) => {
    env[`EDGENODE_NODE${i + 1}_ADDR`] = `127.0.0.1:${n.listenPort}`;
    env[`EDGENODE_NODE${i + 1}_CHECK`] = String(n.controlPort);
  });
  const cfg = path.join(SOURCE_DIR, 'deploy', 'fleet', 'haproxy.cfg');
  const check = spawnSync(bin, ['-c', '-f', cfg, '-f', extra], { env: { ...process.env, ...env }, encoding: 'utf8' });
  if (check.status !== 0) throw new Error(`haproxy -c: ${check.stdout}${check.stderr}`);
  const proc = spawnLogged(bin, ['-db', '-f', cfg, '-f', extra], path.join(dir, 'haproxy.log'), env);
  await waitListening(port, { what: 'haproxy' });
  return {
    port,
    proc,
    // {node1: 'UP', ...} from the runtime API's "show servers state".
    async serverStates() {
      const text = await new Promise((resolve, reject) => {
        const c = net.connect(sock);
        let buf = '';
        c.on('data', (d) => { buf += d; });
        c.on('end', () => resolve(buf));
        c.on('error', reject);
        c.end('show stat\n');
      });
      const states = {};
      for (const line of text.split('\n')) {
        const f = line.split(',');
        if (f[0] === 'nodes' && f[1] && f[1] !== 'BACKEND') states[f[1]] = f[17];
      }
      return states;
    },
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGTERM');
        await proc.exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

// workerd, the peer the compatibility tests compare against: installed from
// npm into a cache directory once, then started with a generated config.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { sleep, tempDir } from '../../e2e/lib/node.mjs';
import { cacheRoot, npmInstall } from './npm.mjs';

// Pinned: differences.json and the WPT counts describe this version.
export const WORKERD_VERSION = '1.20261117.1';
export const COMPATIBILITY_DATE = '2025-01-01';

function binaryIn(prefix) {
  return path.join(prefix, 'node_modules', '@cloudflare', 'workerd-linux-64', 'bin', 'workerd');
}

function runs(bin) {
  const r = spawnSync(bin, ['--version'], { encoding: 'utf8', timeout: 20000 });
  return r.status === 0 && /workerd/.test(r.stdout);
}

let found; // memo: {bin} or {skip}

// Finds or installs workerd. Resolves {bin} or {skip: reason}; never throws.
// EDGENODE_WORKERD names a binary to use instead of installing one.
export async function ensureWorkerd() {
  if (found !== undefined) return found;
  found = await locate();
  return found;
}

async function locate() {
  if (process.env.EDGENODE_WORKERD) {
    const bin = process.env.EDGENODE_WORKERD;
    return runs(bin) ? { bin } : { skip: `EDGENODE_WORKERD=${bin} does not run` };
  }
  if (process.platform !== 'linux' || process.arch !== 'x64') {
    return { skip: `no workerd package for ${process.platform}-${process.arch} is pinned here` };
  }
  const prefix = path.join(cacheRoot(), `workerd-${WORKERD_VERSION}`);
  if (existsSync(binaryIn(prefix)) && runs(binaryIn(prefix))) return { bin: binaryIn(prefix) };
  const installed = await npmInstall(`workerd@${WORKERD_VERSION}`, prefix, binaryIn);
  if (installed.skip) return installed;
  if (!existsSync(binaryIn(prefix)) || !runs(binaryIn(prefix))) {
    return { skip: `workerd@${WORKERD_VERSION} was installed but does not run on this machine` };
  }
  return { bin: binaryIn(prefix) };
}

// Free loopback ports, found by binding port 0. workerd binds them a moment
// later; another process taking one meanwhile makes startWorkerd fail loudly.
export async function freePorts(n) {
  const servers = [];
  try {
    for (let i = 0; i < n; i++) {
      const srv = net.createServer();
      await new Promise((resolve, reject) => {
        srv.once('error', reject);
        srv.listen(0, '127.0.0.1', resolve);
      });
      servers.push(srv);
    }
    return servers.map((s) => s.address().port);
  } finally {
    await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  }
}

function capnpString(s) {
  return JSON.stringify(s);
}

function canConnect(port) {
  return new Promise((resolve) => {
    const sock = net.connect({ port, host: '127.0.0.1' });
    sock.once('connect', () => { sock.destroy(); resolve(true); });
    sock.once('error', () => resolve(false));
  });
}

// Starts workerd serving each of `services` ({name, source}) on its own
// loopback port. Resolves {ports: Map name -> port, stop(), logs()}.
export async function startWorkerd(bin, services, { compatibilityDate = COMPATIBILITY_DATE } = {}) {
  const dir = tempDir('edgenode-workerd-');
  const ports = await freePorts(services.length);
  const svc = [];
  const sockets = [];
  const workers = [];
  services.forEach((s, i) => {
    const file = `w${i}.js`;
    writeFileSync(path.join(dir, file), s.source);
    svc.push(`(name = ${capnpString(s.name)}, worker = .w${i})`);
    sockets.push(`(name = ${capnpString(`s${i}`)}, address = ${capnpString(`127.0.0.1:${ports[i]}`)}, ` +
      `http = (), service = ${capnpString(s.name)})`);
    workers.push(`const w${i} :Workerd.Worker = (\n  modules = [ (name = "worker.js", esModule = embed ${capnpString(file)}) ],\n` +
      `  compatibilityDate = ${capnpString(compatibilityDate)},\n);`);
  });
  const config = `using Workerd = import "/workerd/workerd.capnp";\n` +
    `const config :Workerd.Config = (\n  services = [\n    ${svc.join(',\n    ')}\n  ],\n` +
    `  sockets = [\n    ${sockets.join(',\n    ')}\n  ],\n);\n${workers.join('\n')}\n`;
  writeFileSync(path.join(dir, 'config.capnp'), config);
  const proc = spawn(bin, ['serve', 'config.capnp'], {
    cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true,
  });
  const out = [];
  proc.stdout.on('data', (d) => out.push(d));
  proc.stderr.on('data', (d) => out.push(d));
  let exited = null;
  const exitedP = new Promise((resolve) => proc.on('exit', (code, signal) => {
    exited = { code, signal };
    resolve(exited);
  }));
  const kill = () => {
    try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* gone */ }
  };
  process.on('exit', kill);
  const logs = () => Buffer.concat(out).toString('utf8');
  const deadline = Date.now() + 30000;
  for (let i = 0; i < ports.length;) {
    if (exited) throw new Error(`workerd exited (${JSON.stringify(exited)}):\n${logs().slice(-4000)}`);
    if (await canConnect(ports[i])) {
      i++;
      continue;
    }
    if (Date.now() > deadline) {
      kill();
      throw new Error(`workerd did not listen on port ${ports[i]} within 30 s:\n${logs().slice(-4000)}`);
    }
    await sleep(50);
  }
  proc.unref();
  proc.stdout.unref?.();
  proc.stderr.unref?.();
  const byName = new Map(services.map((s, i) => [s.name, ports[i]]));
  return {
    ports: byName,
    logs,
    async stop() {
      proc.ref(); // keep the loop alive until the exit event
      kill();
      await exitedP;
      process.removeListener('exit', kill);
    },
  };
}

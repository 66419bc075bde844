// Test harness for the end-to-end suite: starts the real `edgenode` on free
// ports with a temporary data directory and talks to it over sockets, the way
// an operator and a client would.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

export const SOURCE_DIR = process.env.EDGENODE_SOURCE_DIR ?? path.resolve(here, '../../..');
export const BIN_DIR = process.env.EDGENODE_BIN_DIR ?? path.join(SOURCE_DIR, 'build', 'bin');
export const EDGENODE = path.join(BIN_DIR, 'edgenode');
export const EDGECTL = path.join(BIN_DIR, 'edgectl');

// CI exports EDGENODE_CI=1 (.ci/run): there every input a test needs (a
// tool, an npm package, the conformance vectors) must be present, and a
// missing one fails the test instead of skipping it, so that a green run
// cannot hide a suite that did not run.
export const INPUTS_REQUIRED = process.env.EDGENODE_CI === '1';

// For a test (t: its context) whose input is missing: `what` is missing,
// `how` says how to get it. Skips, or under EDGENODE_CI=1 fails.
export function missingInput(t, what, how) {
  const message = `${what}; ${how}`;
  if (INPUTS_REQUIRED) throw new Error(`${message} (EDGENODE_CI=1: a missing input fails the test)`);
  t.skip(message);
}

const READY_TIMEOUT_MS = 20000;

// Everything started here, so that a failing or interrupted test never leaves
// processes or directories behind.
const liveNodes = new Set();
const tempDirs = new Set();
const finishedLogs = [];

export function tempDir(prefix = 'edgenode-e2e-') {
  const dir = mkdtempSync(path.join(tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

function killGroup(proc, signal) {
  if (proc.exitCode !== null || proc.signalCode !== null) return;
  try {
    // detached: the supervisor leads a process group that holds its workers too
    process.kill(-proc.pid, signal);
  } catch {
    try { proc.kill(signal); } catch { /* already gone */ }
  }
}

process.on('exit', (code) => {
  for (const node of liveNodes) {
    killGroup(node.proc, 'SIGKILL');
    finishedLogs.push(node);
  }
  if ((code || process.exitCode) && finishedLogs.length) {
    for (const node of finishedLogs) {
      const lines = node.logs.slice(-150).map((l) => l.raw);
      process.stderr.write(`\n--- edgenode ${node.args.join(' ')} (last ${lines.length} log lines) ---\n`);
      process.stderr.write(lines.join('\n') + '\n');
    }
  }
  for (const dir of tempDirs) {
    try { rmSync(dir, { recursive: true, force: true }); } catch { /* best effort */ }
  }
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => process.exit(130));
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Polls fn until it returns a truthy value (or throws only transiently).
export async function waitFor(fn, { timeout = 5000, interval = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeout;
  let lastErr;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what}` +
        (lastErr ? `: ${lastErr.message}` : ''));
    }
    await sleep(interval);
  }
}

let helpCache;
// `edgenode --help` output (stdout + stderr), to find optional flags.
export function edgenodeHelp() {
  if (helpCache === undefined) {
    const r = spawnSync(EDGENODE, ['--help'], { encoding: 'utf8', timeout: 5000 });
    helpCache = `${r.stdout ?? ''}${r.stderr ?? ''}`;
  }
  return helpCache;
}
export function hasFlag(flag) {
  return edgenodeHelp().includes(flag);
}

function parsePort(addr) {
  const m = /:(\d+)$/.exec(String(addr));
  if (!m) throw new Error(`cannot read a port from ${JSON.stringify(addr)}`);
  return Number(m[1]);
}

class Node {
  constructor(proc, args, dataDir) {
    this.proc = proc;
    this.args = args;
    this.dataDir = dataDir;
    this.logs = [];        // {raw, json} for every stderr line (json null if not JSON)
    this.stdout = [];
    this.exited = new Promise((resolve) => {
      proc.on('exit', (code, signal) => resolve({ code, signal }));
    });
    this.stderrClosed = new Promise((resolve) => proc.stderr.on('close', resolve));
    this.waiters = new Set();
    this.listenPort = 0;
    this.controlPort = 0;
    this.token = '';
    this.readyLine = null;
    this.allowCrashes = false;
  }

  onLine(raw) {
    let json = null;
    try { json = JSON.parse(raw); } catch { /* keep raw */ }
    const line = { raw, json };
    this.logs.push(line);
    for (const w of this.waiters) {
      if (w.pred(line)) {
        this.waiters.delete(w);
        w.resolve(line);
      }
    }
  }

  // Resolves with the first log line (already seen or future) matching pred({raw, json}).
  waitForLog(pred, { timeout = 5000, from = 0, what = 'log line' } = {}) {
    for (let i = from; i < this.logs.length; i++) {
      if (pred(this.logs[i])) return Promise.resolve(this.logs[i]);
    }
    return new Promise((resolve, reject) => {
      const w = { pred, resolve };
      const timer = setTimeout(() => {
        this.waiters.delete(w);
        reject(new Error(`timed out after ${timeout} ms waiting for ${what}`));
      }, timeout);
      w.resolve = (line) => { clearTimeout(timer); resolve(line); };
      this.waiters.add(w);
    });
  }

  logsMatching(pred) {
    return this.logs.filter(pred);
  }

  // Sends `signal` to the supervisor (null: it was sent already) and waits for it
  // to exit; returns the exit code (or the signal name when it died from one).
  // SIGKILLs the group after timeout ms.
  // clean: also fail unless the exit code is 0.
  async stop({ signal = 'SIGTERM', timeout = 15000, clean = false } = {}) {
    if (signal && this.proc.exitCode === null && this.proc.signalCode === null) {
      try { this.proc.kill(signal); } catch { /* gone */ }
    }
    let timer;
    const res = await Promise.race([
      this.exited,
      new Promise((resolve) => {
        timer = setTimeout(() => resolve(null), timeout);
      }),
    ]);
    clearTimeout(timer);
    if (res === null) {
      killGroup(this.proc, 'SIGKILL');
      await this.exited;
      this.forget();
      throw new Error(`edgenode did not exit within ${timeout} ms of ${signal}`);
    }
    // Workers must go with the supervisor; make sure of it for the next tests.
    killGroup(this.proc, 'SIGKILL');
    this.forget();
    const code = res.code ?? res.signal;
    // read the last stderr lines (a sanitizer report, say); the pipe closes
    // once the workers, which share it, are gone too
    let t2;
    await Promise.race([this.stderrClosed, new Promise((resolve) => { t2 = setTimeout(resolve, 2000); })]);
    clearTimeout(t2);
    const problems = this.problems();
    if (problems.length) {
      throw new Error(`edgenode reported problems:\n${problems.map((l) => l.raw).join('\n')}`);
    }
    if (clean && code !== 0) {
      throw new Error(`edgenode exited with ${code} after ${signal}\n${this.dumpLogs(30)}`);
    }
    return code;
  }

  // Log lines that are not JSON objects with the members every line must have.
  malformedLogs() {
    return this.logs.filter((l) => !l.json || typeof l.json !== 'object' ||
      typeof l.json.time !== 'string' || Number.isNaN(Date.parse(l.json.time)) ||
      !['debug', 'info', 'warn', 'error'].includes(l.json.level) ||
      typeof l.json.process !== 'string' || typeof l.json.msg !== 'string');
  }

  // Sanitizer reports, and worker processes that died on their own (unless the
  // test killed them and set allowCrashes).
  problems() {
    return this.logs.filter((l) =>
      /AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:/.test(l.raw) ||
      (!this.allowCrashes && /^worker exited/.test(l.json?.msg ?? '') &&
        (l.json.signal || l.json.exit_status)));
  }

  kill() {
    killGroup(this.proc, 'SIGKILL');
    this.forget();
    return this.exited;
  }

  forget() {
    if (liveNodes.delete(this)) finishedLogs.push(this);
  }

  dumpLogs(n = 100) {
    return this.logs.slice(-n).map((l) => l.raw).join('\n');
  }

  // --- control API ---

  async control(method, urlPath, { body, headers = {}, token } = {}) {
    const h = { ...headers };
    const tok = token === undefined ? this.token : token;
    if (tok !== null) h.authorization = `Bearer ${tok}`;
    let payload = body;
    if (body !== undefined && typeof body !== 'string' && !Buffer.isBuffer(body) &&
        !(body instanceof Uint8Array)) {
      payload = JSON.stringify(body);
      if (!Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) {
        h['content-type'] = 'application/json';
      }
    }
    return httpRequest({
      port: this.controlPort, method, path: urlPath, headers: h, body: payload,
    });
  }

  // modulesOrSource: a string (one module, sent as application/javascript) or
  // {"file.js": "source", ...} (sent as JSON with main_module = opts.main or the first key).
  async deploy(name, modulesOrSource, opts = {}) {
    if (typeof modulesOrSource === 'string' && !opts.json) {
      return this.control('PUT', `/v1/workers/${name}`, {
        body: modulesOrSource,
        headers: { 'content-type': 'application/javascript' },
      });
    }
    const modules = typeof modulesOrSource === 'string'
      ? { 'index.js': modulesOrSource } : modulesOrSource;
    const body = { main_module: opts.main ?? Object.keys(modules)[0], modules };
    if (opts.limits) body.limits = opts.limits;
    if (opts.bindings) body.bindings = opts.bindings;
    if (opts.egress) body.egress = opts.egress;
    return this.control('PUT', `/v1/workers/${name}`, { body });
  }

  // Like deploy, but fails the test with the server's answer unless it is 2xx.
  async deployOk(name, modulesOrSource, opts = {}) {
    const r = await this.deploy(name, modulesOrSource, opts);
    if (r.status < 200 || r.status > 299) {
      throw new Error(`deploy ${name} -> ${r.status} ${r.text}`);
    }
    return r;
  }

  async nodeInfo() {
    const r = await this.control('GET', '/v1/node');
    if (r.status !== 200) throw new Error(`GET /v1/node -> ${r.status} ${r.text}`);
    return r.json;
  }

  async workerPids() {
    const info = await this.nodeInfo();
    return workerList(info).map((w) => w.pid).filter((p) => Number.isInteger(p) && p > 0);
  }

  // --- ingress ---

  ingress(workerName, urlPath = '/', { method = 'GET', headers = {}, body, host, timeout } = {}) {
    return httpRequest({
      port: this.listenPort, method, path: urlPath,
      headers: { host: host ?? `${workerName}.localhost`, ...headers }, body, timeout,
    });
  }
}

// GET /v1/node lists worker processes under "workers" (or "processes").
export function workerList(info) {
  const list = info.workers ?? info.processes ?? info.worker_processes;
  return Array.isArray(list) ? list : [];
}

// Waits until a cordoned tenant's dedicated process said HELLO (and is not
// notPid); returns the tenant as GET /v1/tenants/NAME shows it.
export async function dedicatedReady(node, name, { notPid } = {}) {
  return waitFor(async () => {
    const r = await node.control('GET', `/v1/tenants/${name}`);
    if (r.status !== 200) throw new Error(`GET /v1/tenants/${name} -> ${r.status} ${r.text}`);
    const d = r.json.dedicated;
    return r.json.state === 'cordoned' && d?.state === 'ready' && d.pid !== notPid ? r.json : null;
  }, { timeout: 40000, what: `${name}'s dedicated process` });
}

// Starts edgenode and waits for its "ready" line.
export async function startNode({
  workers = 2, dev = false, extraArgs = [], dataDir, configFile, env = {}, expectDataDir,
  listen = '127.0.0.1:0', control = '127.0.0.1:0', readyTimeout = READY_TIMEOUT_MS, nofile,
  wrapper,
} = {}) {
  // null for listen / control / workers / dataDir leaves the flag out (config file tests)
  // nofile: RLIMIT_NOFILE (soft and hard) the node starts with
  // wrapper: a command that execs its arguments (edgenode and its flags), e.g. unshare
  const data = dataDir === undefined ? tempDir() : dataDir;
  const args = [];
  if (listen !== null) args.push('--listen', listen);
  if (control !== null) args.push('--control', control);
  if (data !== null) args.push('--data', data);
  if (workers !== null) args.push('--workers', String(workers));
  if (dev) args.push('--dev');
  if (configFile) args.push('--config', configFile);
  args.push(...extraArgs);
  let [file, argv] = nofile === undefined ? [EDGENODE, args]
    : ['/bin/sh', ['-c', `ulimit -n ${Number(nofile)} && exec "$0" "$@"`, EDGENODE, ...args]];
  if (wrapper) [file, argv] = [wrapper[0], [...wrapper.slice(1), file, ...argv]];
  const proc = spawn(file, argv, {
    cwd: SOURCE_DIR,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: { ...process.env, ...env },
  });
  // expectDataDir: where the data dir is when only the config file names it
  const node = new Node(proc, args, data ?? expectDataDir);
  liveNodes.add(node);
  lineReader(proc.stderr, (l) => node.onLine(l));
  lineReader(proc.stdout, (l) => node.stdout.push(l));
  const spawnError = new Promise((_, reject) => proc.on('error', reject));

  let ready;
  try {
    ready = await Promise.race([
      node.waitForLog((l) => l.json?.msg === 'ready', { timeout: readyTimeout, what: '"ready"' }),
      node.exited.then(({ code, signal }) => {
        throw new Error(`edgenode exited (code ${code}, signal ${signal}) before "ready"`);
      }),
      spawnError,
    ]);
  } catch (err) {
    node.kill();
    err.message += `\nedgenode ${args.join(' ')}\n--- logs ---\n${node.dumpLogs(60)}`;
    throw err;
  }
  node.readyLine = ready.json;
  node.listenPort = parsePort(ready.json.listen);
  node.controlPort = parsePort(ready.json.control);
  const tf = args.indexOf('--control-token-file');
  node.tokenFile = tf >= 0 ? path.resolve(SOURCE_DIR, args[tf + 1]) : path.join(node.dataDir, 'control.token');
  try {
    node.token = readFileSync(node.tokenFile, 'utf8').trim();
  } catch (err) {
    node.kill();
    throw err;
  }
  // A node a failed test forgot must not keep this process alive: the exit
  // hook above kills it.
  proc.unref();
  proc.stdout.unref?.();
  proc.stderr.unref?.();
  return node;
}

// Runs edgenode to completion (for flag / config errors); returns {code, signal, stdout, stderr}.
export function runEdgenode(args, { timeout = 10000, cwd = SOURCE_DIR } = {}) {
  return runProcess(EDGENODE, args, { timeout, cwd });
}

export function runProcess(file, args, { timeout = 15000, cwd = SOURCE_DIR, input } = {}) {
  return new Promise((resolve, reject) => {
    const proc = spawn(file, args, { cwd, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'], detached: true });
    const out = [];
    const err = [];
    proc.stdout.on('data', (d) => out.push(d));
    proc.stderr.on('data', (d) => err.push(d));
    proc.on('error', reject);
    const timer = setTimeout(() => {
      try { process.kill(-proc.pid, 'SIGKILL'); } catch { /* gone */ }
    }, timeout);
    proc.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({
        code, signal,
        stdout: Buffer.concat(out).toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
      });
    });
    if (input !== undefined) {
      proc.stdin.on('error', () => {}); // the program may exit without reading
      proc.stdin.end(input);
    }
  });
}

function lineReader(stream, onLine) {
  let buf = '';
  stream.setEncoding('utf8');
  stream.on('data', (chunk) => {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      if (line.length) onLine(line);
    }
  });
  stream.on('end', () => {
    if (buf.length) onLine(buf);
    buf = '';
  });
}

// One HTTP request on a fresh connection (no agent, so no pooling surprises).
export function httpRequest({ port, host = '127.0.0.1', method = 'GET', path: p = '/', headers = {}, body, timeout = 15000 }) {
  return new Promise((resolve, reject) => {
    const h = { ...headers };
    if (body !== undefined && !Object.keys(h).some((k) => /^(content-length|transfer-encoding)$/i.test(k))) {
      h['content-length'] = Buffer.byteLength(body);
    }
    const req = http.request({ host, port, method, path: p, headers: h, agent: false, timeout }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const buf = Buffer.concat(chunks);
        const text = buf.toString('utf8');
        let json;
        try { json = JSON.parse(text); } catch { json = undefined; }
        resolve({ status: res.statusCode, headers: res.headers, body: buf, text, json });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`${method} ${p}: no response within ${timeout} ms`)));
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

// Writes `bytes` (a string, Buffer, or array of them written with `gap` ms
// between) on a fresh TCP connection and collects everything until the server
// closes or `timeout` ms pass. Returns {data, text, closed, error, ms}.
export function rawRequest(port, bytes, { timeout = 5000, gap = 0, endWrite = false, onData } = {}) {
  return new Promise((resolve) => {
    const started = Date.now();
    const sock = net.connect({ port, host: '127.0.0.1' });
    const chunks = [];
    let closed = false;
    let error = null;
    let done = false;
    const finish = () => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      const data = Buffer.concat(chunks);
      resolve({ data, text: data.toString('latin1'), closed, error, ms: Date.now() - started });
    };
    const timer = setTimeout(finish, timeout);
    sock.on('data', (d) => {
      chunks.push(d);
      if (onData) onData(Buffer.concat(chunks), sock);
    });
    sock.on('end', () => { closed = true; finish(); });
    sock.on('close', () => { closed = true; finish(); });
    sock.on('error', (e) => { error = e; closed = true; });
    sock.on('connect', async () => {
      const parts = Array.isArray(bytes) ? bytes : [bytes];
      for (let i = 0; i < parts.length; i++) {
        if (i && gap) await sleep(gap);
        if (sock.destroyed) return;
        sock.write(parts[i], () => {});
      }
      if (endWrite) sock.end();
    });
  });
}

// Parses one HTTP/1.1 response (interim 1xx included) at the start of buf.
// Returns {response, used} or null when buf does not hold a complete one yet.
// eof: the connection is closed, so a response without a length ends here.
export function parseOne(buf, { isHead = false, eof = false } = {}) {
  const end = buf.indexOf('\r\n\r\n');
  if (end < 0) return null;
  const head = buf.subarray(0, end).toString('latin1').split('\r\n');
  const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(head[0]);
  if (!m) throw new Error(`bad status line ${JSON.stringify(head[0])}`);
  const status = Number(m[1]);
  const headers = {};
  for (const line of head.slice(1)) {
    const c = line.indexOf(':');
    const k = line.slice(0, c).trim().toLowerCase();
    const v = line.slice(c + 1).trim();
    headers[k] = headers[k] === undefined ? v : `${headers[k]}, ${v}`;
  }
  const res = { status, reason: m[2] ?? '', headers, body: Buffer.alloc(0), text: '' };
  let p = end + 4;
  if (status >= 100 && status < 200) {
    res.interim = true;
    return { response: res, used: p };
  }
  const noBody = isHead || status === 204 || status === 304;
  if (noBody) return { response: res, used: p };
  if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
    const parts = [];
    for (;;) {
      const le = buf.indexOf('\r\n', p);
      if (le < 0) return null;
      const size = parseInt(buf.subarray(p, le).toString('latin1'), 16);
      if (Number.isNaN(size)) throw new Error('bad chunk size');
      if (size === 0) {
        // trailers end with an empty line
        const te = buf.indexOf('\r\n\r\n', le);
        if (te < 0) return null;
        p = te + 4;
        break;
      }
      if (buf.length < le + 2 + size + 2) return null;
      parts.push(buf.subarray(le + 2, le + 2 + size));
      p = le + 2 + size + 2;
    }
    res.body = Buffer.concat(parts);
  } else if (headers['content-length'] !== undefined) {
    const len = Number(headers['content-length']);
    if (buf.length < p + len) return null;
    res.body = buf.subarray(p, p + len);
    p += len;
  } else {
    if (!eof) return null;
    res.body = buf.subarray(p);
    p = buf.length;
  }
  res.text = res.body.toString('utf8');
  return { response: res, used: p };
}

// Parses as many complete responses as buf holds. isHead(i) says whether the
// i-th final response answers a HEAD. Returns {responses, rest}.
export function parseResponses(buf, { isHead = () => false, eof = false } = {}) {
  const responses = [];
  let finals = 0;
  for (;;) {
    const r = parseOne(buf, { isHead: isHead(finals), eof });
    if (!r) break;
    responses.push(r.response);
    if (!r.response.interim) finals++;
    buf = buf.subarray(r.used);
    if (!buf.length) break;
  }
  return { responses, rest: buf };
}

// A persistent client connection for keep-alive / pipelining tests.
export class RawConn {
  constructor(port) {
    this.port = port;
    this.buf = Buffer.alloc(0);
    this.closed = false;
    this.pending = [];   // {isHead, resolve, reject} per expected final response
    this.interim = [];   // 1xx responses seen
  }

  connect() {
    return new Promise((resolve, reject) => {
      this.sock = net.connect({ port: this.port, host: '127.0.0.1' }, () => {
        this.sock.removeListener('error', reject);
        this.sock.on('error', () => {});
        resolve(this);
      });
      this.sock.once('error', reject);
      this.sock.on('data', (d) => this.onData(d));
      this.sock.on('close', () => {
        this.closed = true;
        for (const p of this.pending.splice(0)) p.reject(new Error('connection closed by the server'));
      });
    });
  }

  onData(d) {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    while (this.pending.length && this.buf.length) {
      let r;
      try {
        r = parseOne(this.buf, { isHead: this.pending[0].isHead });
      } catch (err) {
        this.pending.shift().reject(err);
        continue;
      }
      if (!r) return;
      this.buf = this.buf.subarray(r.used);
      if (r.response.interim) {
        this.interim.push(r.response);
        continue;
      }
      this.pending.shift().resolve(r.response);
    }
  }

  // Sends raw bytes and resolves with the next final response.
  request(bytes, { isHead = false } = {}) {
    const p = this.expectOne({ isHead });
    this.sock.write(bytes);
    return p;
  }

  expectOne({ isHead = false } = {}) {
    return new Promise((resolve, reject) => {
      if (this.closed) return reject(new Error('connection closed'));
      this.pending.push({ isHead, resolve, reject });
      this.onData(Buffer.alloc(0));
    });
  }

  write(bytes) {
    this.sock.write(bytes);
  }

  close() {
    this.sock?.destroy();
  }
}

export function writeFile(dir, name, text) {
  const f = path.join(dir, name);
  writeFileSync(f, text);
  return f;
}

// A config file with no cordon rules, for tests whose tenants hit their
// limits on purpose: the cordon monitor would move them out mid-test.
export function noCordonConfig() {
  return writeFile(tempDir(), 'edgenode.json', JSON.stringify({ cordon_rules: [] }));
}

// A GET request in wire format.
export function getRequest(host, urlPath = '/', extra = '') {
  return `GET ${urlPath} HTTP/1.1\r\nHost: ${host}\r\n${extra}\r\n`;
}

// A loopback upstream that answers every request with its path and its
// Authorization header as JSON (what the egress sent, secrets injected).
export async function echoUpstream() {
  const server = http.createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ path: req.url, authorization: req.headers.authorization ?? null }));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return server;
}

// Clients through HAProxy (deploy/fleet/haproxy.cfg) in front of three
// fleet nodes: a node SIGKILLed under load is taken out within HAProxy's
// check interval, and only the requests in flight on it fail; a rolling
// upgrade of all three nodes (deploy/fleet/rolling-upgrade.sh) under load
// fails no request.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { EDGENODE, SOURCE_DIR, tempDir } from '../e2e/lib/node.mjs';
import { freePort, sleep, startFleetNode, startHaproxy, startNats, waitFor } from './lib/fleet.mjs';

const WORKER = 'export default { fetch(req) { return new Response("ok " + new URL(req.url).pathname); } };';

const agent = new http.Agent({ keepAlive: true, maxSockets: 16 });

function get(port, host, urlPath) {
  return new Promise((resolve) => {
    const started = Date.now();
    const req = http.get({ port, host: '127.0.0.1', path: urlPath, agent, headers: { host }, timeout: 10000 }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ started, ended: Date.now(), status: res.statusCode, text }));
      res.on('error', (err) => resolve({ started, ended: Date.now(), error: err.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ started, ended: Date.now(), error: err.message }));
  });
}

// `clients` loops of requests over `hosts` until stop() is called.
function load(port, hosts, clients = 8) {
  const results = [];
  let running = true;
  let n = 0;
  const loops = Array.from({ length: clients }, async (_, c) => {
    while (running) {
      const host = hosts[(n++ + c) % hosts.length];
      const r = await get(port, host, `/${n}`);
      r.host = host;
      results.push(r);
    }
  });
  return {
    results,
    async stop() {
      running = false;
      await Promise.all(loops);
      return results;
    },
  };
}

const failed = (r) => r.error || r.status !== 200 || !r.text.startsWith('ok ');

async function waitReady(node) {
  await waitFor(async () => (await node.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 20000, what: 'ready' });
}

describe('through HAProxy', () => {
  let nats;

  before(async () => { nats = await startNats(3); });
  after(async () => { await nats?.stop(); agent.destroy(); });

  test('a node SIGKILLed under load is out within the check interval; only requests in flight on it fail', async () => {
    const nodes = [];
    for (let i = 1; i <= 3; i++) nodes.push(await startFleetNode(`kill${i}`, nats));
    await Promise.all(nodes.map(waitReady));
    const hp = await startHaproxy(nodes, { checkInter: '1s' });
    try {
      await nodes[0].deployOk('kill', WORKER);
      await waitFor(async () => Object.values(await hp.serverStates()).every((s) => s === 'UP'),
        { timeout: 10000, what: 'all UP' });
      // served on every node before the load
      for (const n of nodes) await waitFor(async () => (await n.ingress('kill')).status === 200, { what: 'served' });
      const l = load(hp.port, ['kill.localhost'], 8);
      await sleep(2000);
      // HAProxy hashes kill.localhost to one node: the one whose count moved
      const counts = await Promise.all(nodes.map(async (n) => {
        const t = await n.control('GET', '/v1/tenants');
        return t.json.tenants.find((x) => x.name === 'kill')?.requests ?? 0;
      }));
      const victim = counts.indexOf(Math.max(...counts));
      nodes[victim].allowCrashes = true;
      const killedAt = Date.now();
      await nodes[victim].kill();
      let downAt = 0;
      await waitFor(async () => {
        const s = await hp.serverStates();
        if (s[`node${victim + 1}`] !== 'UP' && !downAt) downAt = Date.now();
        return downAt > 0;
      }, { timeout: 10000, interval: 50, what: 'HAProxy marks it down' });
      await sleep(2000);
      const results = await l.stop();
      const bad = results.filter(failed);
      const afterKill = results.filter((r) => r.started >= killedAt);
      assert.ok(afterKill.length > 50, `load went on after the kill (${afterKill.length} requests)`);
      // what failed was in flight when the node died: started before, ended after
      for (const r of bad) {
        assert.ok(r.started <= killedAt + 50 && r.ended >= killedAt,
          `a request that was not in flight failed: ${JSON.stringify(r)}`);
      }
      assert.ok(bad.length <= 16, `at most one request per connection in flight failed (${bad.length})`);
      const detect = downAt - killedAt;
      assert.ok(detect < 4000, `HAProxy took it out within inter x fall (+1 s): ${detect} ms`);
      console.log(`failover: down after ${detect} ms; ${bad.length} of ${results.length} requests failed`);
    } finally {
      await hp.stop();
      for (const n of nodes) await n.stop().catch(() => {});
    }
  });

  test('a rolling upgrade of all three nodes under load fails no request', async () => {
    const dir = tempDir('edgenode-fleet-rolling-');
    const specs = [];
    for (let i = 1; i <= 3; i++) {
      specs.push({ name: `roll${i}`, listen: await freePort(), control: await freePort(), data: path.join(dir, `data${i}`) });
    }
    const nodes = [];
    for (const s of specs) {
      nodes.push(await startFleetNode(s.name, nats, {
        listen: `127.0.0.1:${s.listen}`, control: `127.0.0.1:${s.control}`, dataDir: s.data,
      }));
    }
    await Promise.all(nodes.map(waitReady));
    // The "upgrade" of node i: stop its process (drained by then) and start
    // the binary again on the same data and ports, as systemd would.
    const pids = nodes.map((n) => n.proc.pid);
    specs.forEach((s, i) => {
      const args = ['--listen', `127.0.0.1:${s.listen}`, '--control', `127.0.0.1:${s.control}`,
        '--data', s.data, '--workers', '1', '--fleet', nats.urls, '--node-name', s.name];
      writeFileSync(path.join(dir, `pid${i + 1}`), String(pids[i]));
      writeFileSync(path.join(dir, `restart-${i + 1}.sh`), [
        'set -e',
        `pid=$(cat ${dir}/pid${i + 1})`,
        'kill -TERM "$pid" 2>/dev/null || true',
        'for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done',
        `setsid ${EDGENODE} ${args.join(' ')} >>${dir}/node${i + 1}.log 2>&1 < /dev/null &`,
        `echo $! > ${dir}/pid${i + 1}`,
      ].join('\n'));
    });
    const hp = await startHaproxy(nodes, { checkInter: '1s' });
    let script;
    try {
      await nodes[0].deployOk('roll', WORKER);
      for (const n of nodes) await waitFor(async () => (await n.ingress('roll')).status === 200, { what: 'served' });
      await waitFor(async () => Object.values(await hp.serverStates()).every((s) => s === 'UP'),
        { timeout: 10000, what: 'all UP' });
      const hosts = Array.from({ length: 9 }, () => 'roll.localhost');
      const l = load(hp.port, hosts, 8);
      await sleep(1000);
      const tokenFile = path.join(dir, 'token');
      writeFileSync(tokenFile, nodes[0].token);
      // every node has its own token: the script is run once per node
      const out = [];
      for (let i = 0; i < 3; i++) {
        writeFileSync(tokenFile, nodes[i].token);
        script = spawn(path.join(SOURCE_DIR, 'deploy/fleet/rolling-upgrade.sh'), [
          '--restart', `bash ${dir}/restart-{index}.sh`.replace('{index}', String(i + 1)),
          '--token-file', tokenFile, '--out-wait', '3', '--in-wait', '3',
          `http://127.0.0.1:${specs[i].control}`,
        ], { stdio: ['ignore', 'pipe', 'pipe'] });
        let text = '';
        script.stdout.on('data', (d) => { text += d; });
        script.stderr.on('data', (d) => { text += d; });
        const code = await new Promise((resolve) => script.on('exit', resolve));
        out.push(text);
        assert.equal(code, 0, `rolling-upgrade.sh for node ${i + 1}:\n${text}`);
      }
      await sleep(1000);
      const results = await l.stop();
      const bad = results.filter(failed);
      assert.equal(bad.length, 0, `failed requests: ${JSON.stringify(bad.slice(0, 5))}\n${out.join('\n')}`);
      assert.ok(results.length > 200, `load ran throughout (${results.length} requests)`);
      // every node came back as a new process and serves
      for (let i = 0; i < 3; i++) {
        const pid = Number(readFileSync(path.join(dir, `pid${i + 1}`), 'utf8'));
        assert.notEqual(pid, pids[i]);
        const r = await get(specs[i].listen, 'roll.localhost', '/after');
        assert.equal(r.status, 200);
      }
      console.log(`rolling upgrade: ${results.length} requests, 0 failed`);
    } finally {
      await hp.stop();
      for (const n of nodes) await n.stop().catch(() => {});
      for (let i = 0; i < 3; i++) {
        try { process.kill(-Number(readFileSync(path.join(dir, `pid${i + 1}`), 'utf8')), 'SIGKILL'); } catch { /* gone */ }
        try { process.kill(Number(readFileSync(path.join(dir, `pid${i + 1}`), 'utf8')), 'SIGKILL'); } catch { /* gone */ }
      }
    }
  });
});

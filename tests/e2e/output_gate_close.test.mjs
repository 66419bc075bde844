// A response held in the output gate's batch while the worker's facet
// connections are closed by a delete or a change of version (docs/workers.md,
// "Durability"): the client must never hear "stored" for a write that is not.
// Either the write is committed and answered 200, or it is not stored and the
// client gets a 5xx.
//
// Where the window is. A version's response that may reflect uncommitted
// writes is held (worker/gate.c, gate_defer) and the batch is committed by an
// idle handle, on the next turn of the worker process's loop. Requests and
// timers run in the loop's check phase, so between their response and the
// commit there is no poll phase: no supervisor frame can land there. But a
// run resumed by the egress's answer to its fetch() runs inside the poll
// phase (worker/egress_link.c settles the call as the frame is read), so a
// write made right after `await fetch()`, and the response held for it, wait
// through the rest of that poll phase. A supervisor frame read in the same
// phase, after the egress's, is handled with the response held: "the worker
// changed" closes its facet connections (worker/tenants.c, tenant_changed).
//
// How the test gets there every time. Both frames must be ready in one
// epoll_wait, the egress's first (epoll reports descriptors in the order they
// became ready). So the worker process is stopped (SIGSTOP, and every thread
// of it seen stopped in /proc: a thread that had not stopped yet would still
// take the egress's frame alone), the upstream answers, the egress hands the
// answer on (its debug line for the fetch comes after it wrote the frame),
// the delete or the traffic change is made (the supervisor writes its frame
// before it answers the control request), and the process goes on (SIGCONT)
// to find both frames in its sockets, in the order they came. It is stopped
// for a few milliseconds, far under the supervisor's heartbeat limit (3 s).
//
// What breaks it: closing the connections before the batch was committed
// (without the gate_flush in facet_link_changed) rolls the write back, and
// the held response then goes out as 200: with commit 686e8cd reverted the
// first round of each test fails, every run.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { missingInput, startNode, waitFor } from './lib/node.mjs';

const WORKER = `export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const sql = env.DB;
    sql.exec("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, tag TEXT)");
    const tag = url.searchParams.get("tag") ?? "";
    if (url.pathname === "/write-after-fetch") {
      await fetch(url.searchParams.get("url"));
      // Runs as the egress's answer is read: the write, and the response
      // held for it, wait for the next turn's commit.
      sql.exec("INSERT INTO t (tag) VALUES (?)", tag);
      return new Response("stored " + tag);
    }
    return Response.json(sql.exec("SELECT count(*) AS n FROM t WHERE tag = ?", tag).one().n);
  },
};`;

const hasSqlite = spawnSync('sqlite3', ['-version'], { encoding: 'utf8' }).status === 0;

let node;
let upstream;
let upstreamPort;
// Requests the upstream holds, by the tag in their path, until released.
const held = new Map();

function spec() {
  return {
    bindings: { DB: { type: 'facet' } },
    egress: [{ match: `http://127.0.0.1:${upstreamPort}/` }],
    limits: { cpu_ms: 1000 },
  };
}

function rowsTagged(name, tag) {
  const file = path.join(node.dataDir, 'facets', `${name}.sqlite`);
  // (a busy timeout: the worker closing its connection checkpoints the WAL
  // under an exclusive lock, right after it answered)
  const r = spawnSync('sqlite3', ['-batch', '-cmd', '.timeout 10000', file,
    `SELECT count(*) FROM t WHERE tag = '${tag}'`],
    { encoding: 'utf8', timeout: 30000 });
  if (r.status !== 0) throw new Error(`sqlite3: ${r.stderr}`);
  return Number(r.stdout.trim());
}

before(async () => {
  upstream = http.createServer((req, res) => {
    const m = /^\/hold\/([\w-]+)$/.exec(req.url);
    if (m) held.set(m[1], res);
    else res.end('now');
  });
  await new Promise((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  upstreamPort = upstream.address().port;
  node = await startNode({
    workers: 1,
    extraArgs: ['--egress-allow-cidr', '127.0.0.1/32', '--log-level', 'debug'],
  });
});

after(async () => {
  if (node) await node.stop();
  if (upstream) upstream.close();
});

// Whether every thread of the process is stopped: kill() only starts the
// stop, and a thread that has not reached it yet can still take an event.
function stopped(pid) {
  const dir = `/proc/${pid}/task`;
  return readdirSync(dir).every((tid) => {
    const stat = readFileSync(`${dir}/${tid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] === 'T';
  });
}

// Makes the worker's write wait in the batch while `change` lands; returns
// the client's answer.
async function writeDuringChange(name, tag, change) {
  const url = `http://127.0.0.1:${upstreamPort}/hold/${tag}`;
  const answer = node.ingress(name, `/write-after-fetch?tag=${tag}&url=${encodeURIComponent(url)}`,
    { method: 'POST', timeout: 30000 });
  await waitFor(() => held.has(tag), { timeout: 10000, what: `the fetch of ${tag} at the upstream` });
  const [pid] = await node.workerPids();
  assert.ok(pid > 0, 'the worker process');
  const from = node.logs.length;
  process.kill(pid, 'SIGSTOP');
  try {
    await waitFor(() => stopped(pid), { timeout: 2000, interval: 1, what: 'the worker process stopped' });
    held.get(tag).end('released');
    // The egress logs the fetch once the worker has its answer
    await node.waitForLog((l) => l.json?.tenant === name && /^fetch GET /.test(l.json?.msg ?? '') &&
      l.json.msg.includes(`/hold/${tag}`), { from, timeout: 2000, what: 'the egress handing the answer on' });
    await change();
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  return answer;
}

function assertStoredIffOk(r, rows, what) {
  console.log(`${what}: ${r.status} ${r.status === 200 ? r.text : r.json?.error}; rows stored: ${rows}`);
  if (r.status === 200) {
    assert.equal(rows, 1, `${what}: answered 200 (${r.text}) but the write is not stored`);
  } else {
    assert.ok(r.status >= 500, `${what}: ${r.status} ${r.text}`);
    assert.equal(rows, 0, `${what}: refused (${r.status}) but the write is stored`);
  }
}

test('a delete arriving while a write waits in the batch: the answer says what was stored', async (t) => {
  if (!hasSqlite) return missingInput(t, 'the sqlite3 CLI is not installed', 'apt-get install sqlite3');
  for (let round = 0; round < 3; round++) {
    const name = `gated-del${round}`;
    const tag = `del${round}`;
    await node.deployOk(name, WORKER, { ...spec(), json: true });
    // loaded, and the egress link made, before the interleaving
    const warm = await node.ingress(name, `/write-after-fetch?tag=warm&url=${encodeURIComponent(`http://127.0.0.1:${upstreamPort}/now`)}`,
      { method: 'POST' });
    assert.equal(warm.status, 200, warm.text);
    const r = await writeDuringChange(name, tag, async () => {
      const d = await node.control('DELETE', `/v1/workers/${name}`);
      assert.equal(d.status, 200, d.text);
    });
    assertStoredIffOk(r, rowsTagged(name, tag), `round ${round}`);
    // the process goes on serving, and the worker deployed again has the facet
    await node.deployOk(name, WORKER, { ...spec(), json: true });
    const c = await node.ingress(name, `/count?tag=${tag}`);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json, r.status === 200 ? 1 : 0);
  }
});

test('a traffic change arriving while a write waits in the batch: the answer says what was stored', async (t) => {
  if (!hasSqlite) return missingInput(t, 'the sqlite3 CLI is not installed', 'apt-get install sqlite3');
  const name = 'gated-split';
  await node.deployOk(name, WORKER, { ...spec(), json: true });
  const second = await node.deployOk(name, WORKER.replace('"stored "', '"stored by v2 "'), { ...spec(), json: true });
  const v2 = second.json.version;
  for (let round = 0; round < 3; round++) {
    const tag = `split${round}`;
    // the version that serves the write is the one the change moves traffic away from
    const to = round % 2 === 0 ? v2 - 1 : v2;
    const warm = await node.ingress(name, `/write-after-fetch?tag=warm&url=${encodeURIComponent(`http://127.0.0.1:${upstreamPort}/now`)}`,
      { method: 'POST' });
    assert.equal(warm.status, 200, warm.text);
    const r = await writeDuringChange(name, tag, async () => {
      const s = await node.control('PUT', `/v1/workers/${name}/traffic`, { body: { [to]: 100 } });
      assert.equal(s.status, 200, s.text);
    });
    assertStoredIffOk(r, rowsTagged(name, tag), `round ${round}`);
    const c = await node.ingress(name, `/count?tag=${tag}`);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json, r.status === 200 ? 1 : 0);
  }
});

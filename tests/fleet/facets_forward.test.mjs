// Streamed bodies through a forward (docs/fleet.md, "Forwarding"): a request
// for a worker whose facets another node owns goes, body and all, to the
// owner, and the owner's answer streams back. Three NATS servers, three
// nodes; the first node owns the worker, the others forward to it. The
// worker reads the request's body to its end, stores its length and SHA-256
// in its facet, says them in headers and answers with a body of the size
// asked for, made from that hash, so the client can check every byte of
// both directions.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';

import {
  ownerIndex, sleep, startFleetNode, startNats, waitFor, waitMembers, waitReady,
} from './lib/fleet.mjs';

const WORKER = `
// n words of the answer from word \`from\` on: word k is seed + k * 0x9E3779B1
function words(seed, from, n) {
  const a = new Uint32Array(n);
  for (let i = 0; i < n; i++) a[i] = (seed + Math.imul(from + i, 0x9E3779B1)) >>> 0;
  return new Uint8Array(a.buffer);
}

export default { async fetch(req, env) {
  const url = new URL(req.url);
  env.DB.exec("CREATE TABLE IF NOT EXISTS bodies (id INTEGER PRIMARY KEY, tag TEXT, len INTEGER, sha TEXT)");
  if (req.method !== "POST") {
    return Response.json(env.DB.exec("SELECT tag, len, sha FROM bodies ORDER BY id").toArray());
  }
  const parts = [];
  let len = 0;
  let reads = 0;
  const reader = req.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    len += value.byteLength;
    reads++;
  }
  const all = new Uint8Array(len);
  let at = 0;
  for (const p of parts) { all.set(p, at); at += p.byteLength; }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  const sha = Array.from(digest, (b) => b.toString(16).padStart(2, "0")).join("");
  env.DB.exec("INSERT INTO bodies (tag, len, sha) VALUES (?, ?, ?)", url.searchParams.get("tag"), len, sha);
  const seed = new DataView(digest.buffer).getUint32(0, true);
  const total = Number(url.searchParams.get("out") ?? 0) / 4;
  let k = 0;
  const body = new ReadableStream({
    pull(c) {
      if (k >= total) { c.close(); return; }
      const n = Math.min(16384, total - k);
      c.enqueue(words(seed, k, n));
      k += n;
    },
  });
  return new Response(body, { headers: {
    "x-body-length": String(len), "x-body-sha256": sha, "x-body-reads": String(reads) } });
} };`;
const SPEC = { json: true, bindings: { DB: { type: 'facet' } }, limits: { cpu_ms: 5000, memory_mb: 256 } };
const MiB = 1024 * 1024;

// What the worker answers for a body whose SHA-256 is `sha` (hex).
function expectedBody(sha, size) {
  const seed = Buffer.from(sha, 'hex').readUInt32LE(0);
  const out = Buffer.alloc(size);
  for (let k = 0; k < size / 4; k++) out.writeUInt32LE((seed + Math.imul(k, 0x9E3779B1)) >>> 0, k * 4);
  return out;
}

// POSTs `parts` (Buffers) as a chunked body (each write is one chunk at
// least; with `length`, a Content-Length body), `gap` ms between them,
// honouring backpressure; with `stopAfter`, the client goes away after that
// many parts. Resolves with the answer, the body kept whole; `readGap`: the
// client reads nothing for that long after the head, so the relays fill.
function post(port, path, parts, { gap = 0, stopAfter, readGap = 0, length = false, agent = false } = {}) {
  const framing = length ? { 'content-length': parts.reduce((n, p) => n + p.length, 0) }
    : { 'transfer-encoding': 'chunked' };
  return new Promise((resolve) => {
    const req = http.request({ port, host: '127.0.0.1', method: 'POST', path, agent,
      headers: { host: 'big.localhost', ...framing }, timeout: 60000 }, async (res) => {
      if (readGap) {
        res.pause();
        await sleep(readGap);
        res.resume();
      }
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: Buffer.concat(chunks),
        reused: req.reusedSocket }));
      res.on('error', (err) => resolve({ error: err.message }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve({ error: err.message }));
    req.on('close', () => resolve({ error: 'closed before the answer' }));
    (async () => {
      for (let i = 0; i < parts.length; i++) {
        if (stopAfter !== undefined && i === stopAfter) {
          // (after the bytes went: the server has part of the body)
          await sleep(200);
          req.destroy();
          return;
        }
        if (i && gap) await sleep(gap);
        if (!req.write(parts[i])) await new Promise((r) => req.once('drain', r));
      }
      req.end();
    })();
  });
}

function split(buf, size) {
  const parts = [];
  for (let i = 0; i < buf.length; i += size) parts.push(buf.subarray(i, i + size));
  return parts;
}

function sha256(buf) {
  return createHash('sha256').update(buf).digest('hex');
}

describe('streamed bodies forwarded to the owner of the facets', () => {
  let nats;
  const nodes = [];

  before(async () => {
    nats = await startNats(3);
    for (let i = 1; i <= 3; i++) nodes.push(await startFleetNode(`big${i}`, nats));
    await Promise.all(nodes.map(waitReady));
    await waitMembers(nodes);
    await nodes[0].deployOk('big', WORKER, SPEC);
    // the first node serves it first, and so owns its facets
    const first = await post(nodes[0].listenPort, '/?tag=first&out=4', [Buffer.from('hello')]);
    assert.equal(first.status, 200, first.error ?? first.body.toString());
    assert.equal(await ownerIndex(nodes, 'big'), 0);
  });

  // (a node that crashed or reported a sanitizer error fails the run here)
  after(async () => {
    const problems = [];
    for (const n of nodes) await n.stop().catch((err) => problems.push(err.message));
    await nats?.stop();
    assert.deepEqual(problems, []);
  });

  async function stored() {
    const r = await nodes[0].ingress('big', '/');
    assert.equal(r.status, 200, r.text);
    return r.json;
  }

  // The answer to a forwarded upload of `sent` (checked in full), and the
  // row the owner stored for it.
  async function assertUploaded(r, tag, sent, out) {
    assert.equal(r.status, 200, r.error ?? r.body?.toString().slice(0, 300));
    assert.equal(Number(r.headers['x-body-length']), sent.length, 'the worker read the whole body');
    assert.equal(r.headers['x-body-sha256'], sha256(sent), 'the body the worker read is the one sent');
    assert.equal(r.body.length, out, 'the client read the whole answer');
    assert.ok(r.body.equals(expectedBody(sha256(sent), out)), 'every byte of the answer as the worker made it');
    const row = (await stored()).find((b) => b.tag === tag);
    assert.deepEqual(row, { tag, len: sent.length, sha: sha256(sent) }, 'the owner stored what it read');
    return Number(r.headers['x-body-reads']);
  }

  test('a chunked body sent slowly, through a node that does not own the facets', async () => {
    const sent = randomBytes(6 * 100 * 1024);
    const r = await post(nodes[1].listenPort, `/?tag=slow&out=${4 * MiB}`, split(sent, 100 * 1024), { gap: 250 });
    const reads = await assertUploaded(r, 'slow', sent, 4 * MiB);
    assert.equal(await ownerIndex(nodes, 'big'), 0, 'the first node still owns the facets');
    console.log(`slow chunked body of ${sent.length} bytes: the owner read it in ${reads} reads`);
  });

  test('a chunked body of 8 MiB and an answer of 8 MiB read late, both ways through the forward', async () => {
    const sent = randomBytes(8 * MiB);
    const r = await post(nodes[2].listenPort, `/?tag=large&out=${8 * MiB}`, split(sent, 64 * 1024),
      { readGap: 500 });
    const reads = await assertUploaded(r, 'large', sent, 8 * MiB);
    assert.ok(reads > 1, `the owner read the 8 MiB in ${reads} reads: streamed, not one buffer`);
    console.log(`8 MiB chunked body: the owner read it in ${reads} reads`);
  });

  test('one keep-alive connection carries forwarded uploads one after the other', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (const [k, length] of [[0, false], [1, true], [2, false]]) {
        const sent = randomBytes(3 * MiB + k);
        const r = await post(nodes[1].listenPort, `/?tag=kept${k}&out=${MiB}`, split(sent, 64 * 1024),
          { agent, length });
        await assertUploaded(r, `kept${k}`, sent, MiB);
        assert.equal(r.reused, k > 0, `upload ${k} on the connection of the first`);
      }
    } finally {
      agent.destroy();
    }
  });

  test('a client that goes away in the middle of its body: nothing stored, both nodes serve on', async () => {
    const before = (await stored()).length;
    // through either forwarding node (which holds a body until it is whole),
    // and on the owner itself, whose worker reads the body as it comes and
    // must see it fail, not end short
    const cuts = [[1, 64 * 1024, false], [2, MiB, true], [0, 64 * 1024, false], [0, MiB, true]];
    for (const [i, size, length] of cuts) {
      const parts = split(randomBytes(4 * MiB), size);
      const r = await post(nodes[i].listenPort, `/?tag=cut${i}&out=1024`, parts, { stopAfter: 2, length });
      assert.ok(r.error, `the client left: ${JSON.stringify(r.status ?? r)}`);
    }
    // the nodes that forward and the owner serve, forwarded or not
    for (const i of [1, 2, 0]) {
      const sent = randomBytes(256 * 1024);
      const r = await post(nodes[i].listenPort, `/?tag=after${i}&out=${64 * 1024}`, split(sent, 32 * 1024));
      await assertUploaded(r, `after${i}`, sent, 64 * 1024);
    }
    const rows = (await stored()).slice(before).map((b) => b.tag);
    assert.deepEqual(rows, ['after1', 'after2', 'after0'], 'nothing stored for the bodies cut short');
  });

  test('a client that goes away in the middle of the answer: both nodes serve on', async () => {
    const left = await new Promise((resolve) => {
      const req = http.request({ port: nodes[1].listenPort, host: '127.0.0.1', method: 'POST', agent: false,
        path: `/?tag=gone&out=${8 * MiB}`, headers: { host: 'big.localhost', 'content-length': 1024 } }, (res) => {
        let got = 0;
        res.on('data', (d) => {
          got += d.length;
          if (got >= MiB) {
            req.destroy();
            resolve({ status: res.statusCode, got });
          }
        });
        res.on('error', () => {});
      });
      req.on('error', () => {});
      req.end(randomBytes(1024));
    });
    assert.equal(left.status, 200);
    // the owner stored it (its answer had begun: the write was committed first)
    await waitFor(async () => (await stored()).some((b) => b.tag === 'gone'), { what: 'the row of the answer cut short' });
    for (const i of [1, 0]) {
      const sent = randomBytes(128 * 1024);
      const r = await post(nodes[i].listenPort, `/?tag=next${i}&out=${2 * MiB}`, [sent]);
      await assertUploaded(r, `next${i}`, sent, 2 * MiB);
    }
  });
});

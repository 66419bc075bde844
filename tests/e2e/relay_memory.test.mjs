// A cordoned tenant's responses are relayed by the shared process as they
// arrive, never held whole: a dozen clients reading 64 MiB bodies slowly
// through the shared process cost it a few MiB each, and every client gets
// its whole body, byte for byte.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { test } from 'node:test';

import { startNode, waitFor } from './lib/node.mjs';

const CLIENTS = 12;
const CHUNK = 65536;
const CHUNKS = 1024; // 64 MiB per response
const MIB = 1024 * 1024;
const PER_REQUEST_MIB = 4; // "a few MiB per relayed request"
// AddressSanitizer keeps freed memory in quarantine (up to 256 MiB by
// default) before reusing it: a sanitizer build's process grows by that much
// whatever it relays. Still far below the 768 MiB a buffering relay needs.
const ASAN_QUARANTINE_MIB = 256;

// /big?n=N: N chunks of 64 KiB, chunk i filled with (i * 7 + seed) & 255,
// generated while they are sent.
const BULK = `export default {
  fetch(request) {
    const url = new URL(request.url);
    if (url.pathname !== '/big') return new Response('ok');
    const n = Number(url.searchParams.get('n'));
    const seed = Number(url.searchParams.get('seed'));
    let i = 0;
    return new Response(new ReadableStream({
      pull(c) {
        if (i < n) c.enqueue(new Uint8Array(${CHUNK}).fill((i++ * 7 + seed) & 255));
        else c.close();
      },
    }), { headers: { 'content-type': 'application/octet-stream' } });
  },
};`;

function expectedHash(n, seed) {
  const h = createHash('sha256');
  const chunk = Buffer.alloc(CHUNK);
  for (let i = 0; i < n; i++) h.update(chunk.fill((i * 7 + seed) & 255));
  return h.digest('hex');
}

// Reads `bytes` of the body, then hangs up.
function leaveEarly(port, path, bytes) {
  return new Promise((resolve, reject) => {
    const req = http.get({ port, host: '127.0.0.1', path, agent: false,
      headers: { host: 'bulk.localhost' } }, (res) => {
      let length = 0;
      res.on('data', (chunk) => {
        length += chunk.length;
        if (length >= bytes) {
          req.destroy();
          resolve(length);
        }
      });
      res.on('error', () => {});
    });
    req.on('error', (err) => (err.code === 'ECONNRESET' ? undefined : reject(err)));
  });
}

function rssBytes(pid) {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

// Reads the body at about 16 MiB/s: a client slower than the dedicated
// process produces, so the shared process must hold back, not gather.
function slowGet(port, path) {
  return new Promise((resolve, reject) => {
    const req = http.get({ port, host: '127.0.0.1', path, agent: false,
      headers: { host: 'bulk.localhost' } }, (res) => {
      const hash = createHash('sha256');
      let length = 0;
      let sinceBreak = 0;
      res.on('data', (chunk) => {
        hash.update(chunk);
        length += chunk.length;
        sinceBreak += chunk.length;
        if (sinceBreak >= MIB) {
          sinceBreak = 0;
          res.pause();
          setTimeout(() => res.resume(), 60);
        }
      });
      res.on('end', () => resolve({ status: res.statusCode, length, hash: hash.digest('hex'),
        complete: res.complete }));
      res.on('error', reject);
      res.on('aborted', () => reject(new Error(`${path}: the response was cut after ${length} bytes`)));
    });
    req.setTimeout(240000, () => req.destroy(new Error(`${path}: timed out`)));
    req.on('error', reject);
  });
}

test('the shared process relays a cordoned tenant\'s large bodies in bounded memory', { timeout: 280000 }, async (t) => {
  const node = await startNode({ workers: 1 });
  try {
    await node.deployOk('bulk', BULK, { json: true, limits: { cpu_ms: 30000, wall_ms: 60000 } });
    const r = await node.control('POST', '/v1/tenants/bulk/cordon', { body: { reason: 'relay test' } });
    assert.equal(r.status, 200, r.text);
    const dedicatedPid = await waitFor(async () => {
      const t = (await node.control('GET', '/v1/tenants/bulk')).json;
      return t.state === 'cordoned' && t.dedicated?.state === 'ready' ? t.dedicated.pid : null;
    }, { timeout: 40000, what: "bulk's dedicated process" });
    const shared = await node.workerPids();
    assert.equal(shared.length, 1);
    assert.notEqual(shared[0], dedicatedPid);
    const pid = shared[0];

    // Warm the path (a handoff and a small streamed body) before the baseline.
    const warm = await slowGet(node.listenPort, '/big?n=16&seed=1');
    assert.equal(warm.hash, expectedHash(16, 1));
    const baseline = rssBytes(pid);

    let peak = baseline;
    const sampler = setInterval(() => {
      try { peak = Math.max(peak, rssBytes(pid)); } catch { /* gone: the results tell */ }
    }, 50);
    let results;
    try {
      results = await Promise.all(Array.from({ length: CLIENTS },
        (_, k) => slowGet(node.listenPort, `/big?n=${CHUNKS}&seed=${k}`)));
    } finally {
      clearInterval(sampler);
    }
    assert.deepEqual(await node.workerPids(), [pid], 'the shared process was not restarted');
    for (let k = 0; k < CLIENTS; k++) {
      const res = results[k];
      assert.equal(res.status, 200);
      assert.equal(res.length, CHUNKS * CHUNK, `client ${k}: body length`);
      assert.equal(res.hash, expectedHash(CHUNKS, k), `client ${k}: body checksum`);
    }
    const sanitized = readFileSync(`/proc/${pid}/maps`, 'utf8').includes('libasan');
    const slack = sanitized ? ASAN_QUARANTINE_MIB * MIB : 0;
    const perRequest = Math.max(0, peak - baseline - slack) / CLIENTS;
    t.diagnostic(`shared process RSS: baseline ${(baseline / MIB).toFixed(1)} MiB, peak ` +
      `${(peak / MIB).toFixed(1)} MiB over ${CLIENTS} relayed responses of ${CHUNKS * CHUNK / MIB} MiB`);
    assert.ok(perRequest < PER_REQUEST_MIB * MIB,
      `the shared process grew by ${((peak - baseline) / MIB).toFixed(1)} MiB for ${CLIENTS} relayed ` +
      `responses (${(perRequest / MIB).toFixed(2)} MiB each, bound ${PER_REQUEST_MIB} MiB); ` +
      `baseline ${(baseline / MIB).toFixed(1)} MiB${sanitized ? ', less the sanitizer\'s quarantine' : ''}`);

    // Clients that hang up in the middle end their relays; the process serves on.
    await Promise.all(Array.from({ length: 4 },
      (_, k) => leaveEarly(node.listenPort, `/big?n=${CHUNKS}&seed=${k}`, 2 * MIB)));
    const again = await slowGet(node.listenPort, '/big?n=16&seed=3');
    assert.equal(again.hash, expectedHash(16, 3));
    assert.deepEqual(await node.workerPids(), [pid], 'the shared process was not restarted');
  } finally {
    await node.stop();
  }
});

// Python cold starts (tests/bench/python.sh runs this; docs/python.md has
// the figures): request to result for a fresh /v1/run Python sandbox, with
// the pool warm and with it empty, beside spawning python3 -c for the same
// code; memory per ready sandbox; fresh sandboxes per second back to back.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { sleep, startNode, tempDir, writeFile } from '../e2e/lib/node.mjs';

const env = (name, fallback) => Number(process.env[name] ?? fallback);
const RUNS = env('RUNS', 40);
const GAP_MS = env('GAP_MS', 2500);
const EMPTY_RUNS = env('EMPTY_RUNS', 10);
const POOL = env('POOL', 2);
const MEMORY_POOL = env('MEMORY_POOL', 4);
const BURST = env('BURST', 20);
const pythonDir = process.env.PYTHON_DIR;

const code = `import json, hashlib
def main(n):
    return json.dumps({"sum": sum(range(n)), "sha": hashlib.sha256(str(n).encode()).hexdigest()[:16]})
`;

function pct(xs, p) {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}
const fmt = (xs) => `p50 ${pct(xs, 50).toFixed(1)} ms, p99 ${pct(xs, 99).toFixed(1)} ms (n=${xs.length})`;

async function node(pool) {
  const config = writeFile(tempDir(), 'edgenode.json', JSON.stringify({
    cordon_rules: [], python_pool: pool, ...(pythonDir ? { python_dir: pythonDir } : {}),
  }));
  return startNode({ workers: 1, configFile: config });
}

async function once(n, i) {
  const t0 = performance.now();
  const r = await n.control('POST', '/v1/run', {
    body: { modules: { 'main.py': `${code}def run(input):\n    return main(input)\n` }, input: 1000 + i },
  });
  const ms = performance.now() - t0;
  if (r.status !== 200) throw new Error(`run ${i}: ${r.status} ${r.text}`);
  return ms;
}

function rssKib(pid) {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
}

// RSS once it has stayed within 1 MiB for 5 s (the pool's thread done),
// waiting at least `ms`.
async function settle(n, ms) {
  await sleep(ms);
  const pid = (await n.workerPids())[0];
  let last = rssKib(pid);
  for (let still = 0, tries = 0; still < 5 && tries < 90; tries++) {
    await sleep(1000);
    const now = rssKib(pid);
    still = Math.abs(now - last) < 1024 ? still + 1 : 0;
    last = now;
  }
  return last;
}

const memoryOnly = process.env.MEMORY_ONLY === '1';

// python3 -c for the same code, same machine, same run.
const native = [];
for (let i = 0; i < (memoryOnly ? 0 : RUNS); i++) {
  const t0 = performance.now();
  const r = spawnSync('python3', ['-c', `${code}print(main(${1000 + i}))`], { encoding: 'utf8' });
  native.push(performance.now() - t0);
  if (r.status !== 0) throw new Error(`python3 -c: ${r.stderr}`);
}
if (!memoryOnly) await timings();

async function timings() {
console.log(`python3 -c (spawn to exit):           ${fmt(native)}`);

let n = await node(POOL);
try {
  // The pool starts filling with the process's first Python sandbox.
  await once(n, -1);
  await sleep(POOL * 3000 + 3000);
  const warm = [];
  for (let i = 0; i < RUNS; i++) {
    warm.push(await once(n, i));
    await sleep(GAP_MS);
  }
  console.log(`edgenode /v1/run, warm pool (${POOL}), ${GAP_MS} ms apart: ${fmt(warm)}`);
  const t0 = performance.now();
  for (let i = 0; i < BURST; i++) await once(n, i);
  const secs = (performance.now() - t0) / 1000;
  console.log(`fresh sandboxes back to back: ${(BURST / secs).toFixed(2)}/s (${BURST} in ${secs.toFixed(1)} s)`);
} finally {
  await n.stop();
}

n = await node(0);
try {
  const empty = [];
  for (let i = 0; i < EMPTY_RUNS; i++) empty.push(await once(n, i));
  console.log(`edgenode /v1/run, pool off (boot per run): ${fmt(empty)}`);
} finally {
  await n.stop();
}
}

// Memory: one run with the pool off, against one run with MEMORY_POOL
// interpreters left ready; the difference is theirs alone (the process's
// compiled Pyodide and what one run leaves are in both).
async function rssAfterOneRun(pool, wait) {
  const m = await node(pool);
  try {
    await once(m, -1);
    return await settle(m, wait);
  } finally {
    await m.stop();
  }
}
const without = await rssAfterOneRun(0, 3000);
const withPool = await rssAfterOneRun(MEMORY_POOL, MEMORY_POOL * 4000 + 4000);
console.log(`worker process RSS after one run: ${(without / 1024).toFixed(1)} MiB with the pool off, ` +
  `${(withPool / 1024).toFixed(1)} MiB with ${MEMORY_POOL} interpreters ready: ` +
  `${((withPool - without) / 1024 / MEMORY_POOL).toFixed(1)} MiB per ready sandbox`);

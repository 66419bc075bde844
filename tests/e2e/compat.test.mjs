// Referee 2: differential testing against workerd. Every worker under
// tests/compat/cases/ runs on workerd (npm package, pinned) and on edgenode;
// each gets the same requests on both, and the answers must agree in status,
// headers (minus the transport's own: date, server, content-length, ...) and
// body, byte for byte. A difference is a bug, or is listed with its reason in
// tests/compat/differences.json. Skipped, with the reason, when workerd
// cannot be installed; under EDGENODE_CI=1 (CI) that fails instead.
import assert from 'node:assert/strict';
import http from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { missingInput, SOURCE_DIR, startNode } from './lib/node.mjs';
import { loadCases } from '../compat/lib/cases.mjs';
import { ensureWorkerd, startWorkerd, WORKERD_VERSION } from '../compat/lib/workerd.mjs';
import { writeResults } from '../compat/lib/results.mjs';

const COMPAT_DIR = path.join(SOURCE_DIR, 'tests', 'compat');
// EDGENODE_COMPAT_ONLY=name,name runs just those cases (while working on them).
const ONLY = process.env.EDGENODE_COMPAT_ONLY ? new Set(process.env.EDGENODE_COMPAT_ONLY.split(',')) : null;
const ALL_CASES = loadCases(path.join(COMPAT_DIR, 'cases'));
const CASES = ONLY ? ALL_CASES.filter((c) => ONLY.has(c.name)) : ALL_CASES;
const DIFFERENCES = JSON.parse(readFileSync(path.join(COMPAT_DIR, 'differences.json'), 'utf8'));
const PARALLEL = 6;

// Headers that describe the transport or the server, not the worker's answer.
const IGNORED_HEADERS = new Set(['date', 'server', 'content-length', 'transfer-encoding',
  'connection', 'keep-alive', 'x-request-id']);

function ignoredHeader(name) {
  return IGNORED_HEADERS.has(name) || name.startsWith('cf-');
}

// One request on a fresh connection; the Host names the case on both sides.
function send(port, host, req) {
  return new Promise((resolve, reject) => {
    const headers = [['host', host], ...req.headers];
    if (req.chunks) headers.push(['transfer-encoding', 'chunked']);
    else if (req.body !== undefined) headers.push(['content-length', String(req.body.length)]);
    const flat = headers.flat();
    const r = http.request({
      host: '127.0.0.1', port, method: req.method, path: req.path, headers: flat,
      agent: false, timeout: 10000, setHost: false,
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const pairs = [];
        for (let i = 0; i < res.rawHeaders.length; i += 2) {
          pairs.push([res.rawHeaders[i].toLowerCase(), res.rawHeaders[i + 1]]);
        }
        resolve({ status: res.statusCode, headers: pairs, body: Buffer.concat(chunks) });
      });
      res.on('error', reject);
    });
    r.on('timeout', () => r.destroy(new Error('no response within 10 s')));
    r.on('error', reject);
    (async () => {
      if (req.chunks) {
        for (const c of req.chunks) {
          r.write(c);
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
      } else if (req.body !== undefined) {
        r.write(req.body);
      }
      r.end();
    })();
  });
}

// Header pairs to compare: transport headers dropped, sorted by name with
// the order of one name's values kept (Set-Cookie lines, say).
function comparableHeaders(pairs) {
  return pairs.filter(([n]) => !ignoredHeader(n))
    .map((p, i) => [...p, i])
    .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : a[2] - b[2]))
    .map(([n, v]) => `${n}: ${v}`);
}

function showBody(buf) {
  const s = buf.toString('utf8');
  const text = /^[\x09\x0a\x0d\x20-\x7e\u00a0-\uffff]*$/.test(s) && !s.includes('\ufffd');
  const shown = text ? JSON.stringify(s) : `base64:${buf.toString('base64')}`;
  return shown.length > 1500 ? `${shown.slice(0, 1500)}... (${buf.length} bytes)` : shown;
}

// The aspects in which two answers differ: "status", "headers", "body"
// ("transport" when one side did not answer at all).
function compare(a, b) {
  const diffs = {};
  if (a.status !== b.status) diffs.status = { workerd: a.status, edgenode: b.status };
  const ha = comparableHeaders(a.headers);
  const hb = comparableHeaders(b.headers);
  if (JSON.stringify(ha) !== JSON.stringify(hb)) diffs.headers = { workerd: ha, edgenode: hb };
  if (!a.body.equals(b.body)) {
    // Where they part, so that a long body's difference is visible.
    let at = 0;
    while (at < a.body.length && a.body[at] === b.body[at]) at++;
    const from = Math.max(0, at - 60);
    diffs.body = {
      workerd: showBody(a.body), edgenode: showBody(b.body),
      full: { workerd: a.body.toString('utf8'), edgenode: b.body.toString('utf8') },
      at, near: { workerd: showBody(a.body.subarray(from, at + 100)), edgenode: showBody(b.body.subarray(from, at + 100)) },
    };
  }
  return diffs;
}

function show(v) {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

// differences.json: {"<case>" or "<case>#<request index>": {"ignore": [...], "reason": "..."}}
function allowedFor(caseName, index) {
  return DIFFERENCES[`${caseName}#${index}`] ?? DIFFERENCES[caseName] ?? null;
}

let workerd = null;
let node = null;
let skip = false;
const results = [];

before(async () => {
  const wd = await ensureWorkerd();
  if (wd.skip) {
    skip = wd.skip;
    return;
  }
  workerd = await startWorkerd(wd.bin, CASES.map((c) => ({ name: c.name, source: c.source })));
  node = await startNode({ workers: 2 });
  // The comparison is about what the APIs do, not about CPU limits (workerd
  // run locally has none): a generous budget keeps a loaded machine from
  // turning a slow case into a 503.
  for (const c of CASES) await node.deployOk(c.name, { 'worker.js': c.source }, { limits: { cpu_ms: 10000 } });
});

after(async () => {
  if (workerd) await workerd.stop();
  if (node) await node.stop({ clean: true });
  if (results.length) {
    writeResults(ONLY ? 'compat-only' : 'compat', { workerd: WORKERD_VERSION, cases: results });
    const equal = results.filter((r) => r.outcome === 'equal').length;
    const known = results.filter((r) => r.outcome === 'known-difference').length;
    const bad = results.length - equal - known;
    console.log(`compat: ${CASES.length} cases, ${results.length} requests: ${equal} equal, ` +
      `${known} known differences, ${bad} unexpected`);
  }
});

test('the cases are at least 60, each with its requests', () => {
  assert.ok(ALL_CASES.length >= 60, `only ${ALL_CASES.length} cases`);
  for (const key of Object.keys(DIFFERENCES)) {
    if (key === 'comment') continue;
    const name = key.split('#')[0];
    assert.ok(ALL_CASES.some((c) => c.name === name), `differences.json names an unknown case ${key}`);
    const entry = DIFFERENCES[key];
    assert.ok(typeof entry.reason === 'string' && entry.reason.length > 0, `${key} has no reason`);
    assert.ok(Array.isArray(entry.ignore) && entry.ignore.length > 0, `${key} ignores nothing`);
  }
});

async function runCase(c) {
  const host = `${c.name}.compat.test`;
  const port = workerd.ports.get(c.name);
  const problems = [];
  for (let i = 0; i < c.requests.length; i++) {
    const req = c.requests[i];
    const failed = (err) => ({ error: err.message });
    const [a, b] = await Promise.all([send(port, host, req).catch(failed),
      send(node.listenPort, host, req).catch(failed)]);
    const diffs = a.error || b.error
      ? { transport: { workerd: a.error ?? 'answered', edgenode: b.error ?? 'answered' } }
      : compare(a, b);
    const allowed = allowedFor(c.name, i);
    const ignore = new Set(allowed?.ignore ?? []);
    const unexpected = Object.keys(diffs).filter((k) => !ignore.has(k));
    const stale = allowed !== null && Object.keys(diffs).length === 0;
    const outcome = unexpected.length ? 'different' : Object.keys(diffs).length ? 'known-difference' : 'equal';
    // Both answers are kept for tests/compat/gen-compat-doc.mjs (the API
    // surface table comes from the api-surface case's).
    const bodies = a.body && b.body
      ? { workerd: a.body.subarray(0, 65536).toString('utf8'), edgenode: b.body.subarray(0, 65536).toString('utf8') }
      : undefined;
    results.push({ case: c.name, request: i, label: req.label, outcome, diffs, stale, bodies });
    if (unexpected.length) {
      problems.push(`${req.label} (#${i}) differs in ${unexpected.join(', ')}:\n` +
        unexpected.map((k) => {
          const d = k === 'body' && diffs.body.at > 400
            ? { workerd: `... ${diffs.body.near.workerd}`, edgenode: `... ${diffs.body.near.edgenode}` } : diffs[k];
          return `  ${k}: workerd  ${show(d.workerd)}\n  ${' '.repeat(k.length)}  edgenode ${show(d.edgenode)}`;
        }).join('\n'));
    }
    if (stale) problems.push(`${req.label} (#${i}) is listed in differences.json but agrees now: remove the entry`);
  }
  return problems;
}

test('edgenode answers every case as workerd does', async (t) => {
  if (skip) {
    missingInput(t, `workerd ${WORKERD_VERSION} is missing: ${skip}`,
      `the test installs it with npm (npm install workerd@${WORKERD_VERSION}, which needs the npm ` +
      'registry) into build/compat-cache/, or set EDGENODE_WORKERD to a workerd binary');
    return;
  }
  assert.ok(CASES.length > 0, `no compat cases to run (tests/compat/cases/, EDGENODE_COMPAT_ONLY=${process.env.EDGENODE_COMPAT_ONLY ?? ''})`);
  const queue = [...CASES];
  const failures = [];
  await Promise.all(Array.from({ length: PARALLEL }, async () => {
    for (let c = queue.shift(); c !== undefined; c = queue.shift()) {
      const problems = await runCase(c);
      if (problems.length) failures.push(`case ${c.name}:\n${problems.join('\n')}`);
    }
  }));
  results.sort((x, y) => (x.case < y.case ? -1 : x.case > y.case ? 1 : x.request - y.request));
  assert.equal(failures.length, 0, `\n${failures.sort().join('\n\n')}`);
});

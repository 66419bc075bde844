// Referee 1: every web-platform-tests URL vector (urltestdata, setters,
// toascii) runs inside a real isolate of a real edgenode. The failures must
// be exactly those tests/compat/expected-failures.json lists, with a reason
// each; when workerd is installed, its counts on the same vectors are printed
// beside ours.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { httpRequest, missingInput, SOURCE_DIR, startNode } from './lib/node.mjs';
import { FILES, judge, loadVectors } from '../compat/wpt/judge.mjs';
import { ensureWorkerd, startWorkerd } from '../compat/lib/workerd.mjs';
import { writeResults } from '../compat/lib/results.mjs';

// The shared folder sits beside the checkout.
const WPT_DIR = path.resolve(SOURCE_DIR, '..', 'shared', 'conformance', 'wpt', 'url', 'resources');
const COMPAT_DIR = path.join(SOURCE_DIR, 'tests', 'compat');
const WORKER_SOURCE = readFileSync(path.join(COMPAT_DIR, 'wpt', 'url-worker.js'), 'utf8');
const EXPECTED = JSON.parse(readFileSync(path.join(COMPAT_DIR, 'expected-failures.json'), 'utf8'));
const BATCH = 150; // vectors per request: small bodies, short CPU bursts

const missing = Object.values(FILES).filter((f) => !existsSync(path.join(WPT_DIR, f)));
// Skipped without them; under EDGENODE_CI=1 (CI) that fails instead.
const skip = missing.length
  ? `WPT vectors not found (${missing.join(', ')} under ../shared/conformance/wpt/url/resources beside the checkout)`
  : false;
const HOW = 'they come with the shared folder beside the checkout (shared/conformance/wpt/url/resources/ ' +
  'from the web-platform-tests repository, url/resources/)';

let node;
const summary = {};

before(async () => {
  if (skip) return;
  node = await startNode({ workers: 1 });
  // A batch is a few hundred URL parses in a cold isolate: the test is about
  // what they give, not the CPU limit, which a loaded machine may reach.
  await node.deployOk('wpt-url', { 'worker.js': WORKER_SOURCE }, { limits: { cpu_ms: 2000 } });
});

after(async () => {
  if (node) await node.stop({ clean: true });
  if (Object.keys(summary).length) writeResults('wpt-url', summary);
});

async function runAll(send, kind, items) {
  const results = [];
  for (let i = 0; i < items.length; i += BATCH) {
    const body = JSON.stringify({ kind, vectors: items.slice(i, i + BATCH).map((x) => x.vector) });
    const r = await send(body);
    assert.equal(r.status, 200, `batch ${i / BATCH} of ${kind}: ${r.status} ${r.text.slice(0, 500)}`);
    results.push(...JSON.parse(r.text));
  }
  return judge(kind, items, results);
}

function count(checks) {
  const failed = checks.filter((c) => c.problems.length > 0);
  return { total: checks.length, passed: checks.length - failed.length, failed };
}

for (const kind of Object.keys(FILES)) {
  test(`WPT ${FILES[kind]}: failures are exactly the expected ones`, async (t) => {
    if (skip) return missingInput(t, skip, HOW);
    const items = loadVectors(WPT_DIR, kind);
    assert.ok(items.length > 0, `no vectors in ${FILES[kind]}`);
    const checks = await runAll((body) => node.ingress('wpt-url', '/', {
      method: 'POST', body, headers: { 'content-type': 'application/json' },
    }), kind, items);
    const { total, passed, failed } = count(checks);
    summary[kind] = { file: FILES[kind], total, passed, failed: failed.map((c) => c.key) };
    console.log(`edgenode WPT ${FILES[kind]}: ${passed}/${total} passed, ${failed.length} failed`);
    const expected = EXPECTED[kind] ?? {};
    for (const [key, reason] of Object.entries(expected)) {
      assert.ok(typeof reason === 'string' && reason.length > 0, `expected failure "${key}" has no reason`);
    }
    const unexpected = failed.filter((c) => !(c.key in expected));
    const fixed = Object.keys(expected).filter((k) => !failed.some((c) => c.key === k));
    assert.deepEqual(unexpected.map((c) => `${c.key}: ${c.problems.join('; ')}`), [],
      'failures not listed in tests/compat/expected-failures.json');
    assert.deepEqual(fixed, [], 'listed as expected failures but passing now: remove them');
  });
}

test('WPT URL vectors on workerd, for comparison (informational)', async (t) => {
  if (skip) return missingInput(t, skip, HOW);
  const wd = await ensureWorkerd();
  if (wd.skip) {
    return missingInput(t, `workerd is missing: ${wd.skip}`,
      'the test installs it with npm (needs the npm registry), or set EDGENODE_WORKERD to a workerd binary');
  }
  const peer = await startWorkerd(wd.bin, [{ name: 'wpt', source: WORKER_SOURCE }]);
  try {
    const port = peer.ports.get('wpt');
    for (const kind of Object.keys(FILES)) {
      const checks = await runAll((body) => httpRequest({
        port, method: 'POST', path: '/', body, headers: { 'content-type': 'application/json' },
      }), kind, loadVectors(WPT_DIR, kind));
      const { total, passed, failed } = count(checks);
      summary[`workerd-${kind}`] = { file: FILES[kind], total, passed, failed: failed.map((c) => c.key) };
      console.log(`workerd WPT ${FILES[kind]}: ${passed}/${total} passed, ${failed.length} failed`);
    }
  } finally {
    await peer.stop();
  }
});

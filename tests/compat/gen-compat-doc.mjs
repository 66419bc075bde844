// Writes docs/compatibility.md from the results the compatibility tests
// leave behind (tests/e2e/wpt_url.test.mjs and tests/e2e/compat.test.mjs),
// so that the document cannot drift from what the tests measured.
//
//   node tests/compat/gen-compat-doc.mjs [results directory]
//
// The results directory defaults to <build>/compat-results (see
// lib/results.mjs). What a test cannot tell (why an API is partial, what is
// missing on purpose) is in NOTES below.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readResults, resultsDir } from './lib/results.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const dir = process.argv[2] ? path.resolve(process.argv[2]) : resultsDir();
const out = path.join(root, 'docs', 'compatibility.md');

const compat = readResults('compat', dir);
const wpt = readResults('wpt-url', dir);
if (compat === null || wpt === null) {
  console.error(`no results in ${dir}: run tests/e2e/wpt_url.test.mjs and tests/e2e/compat.test.mjs first`);
  process.exit(1);
}
const differences = JSON.parse(readFileSync(path.join(here, 'differences.json'), 'utf8'));
const casesDir = path.join(here, 'cases');
const caseSources = Object.fromEntries(readdirSync(casesDir).filter((f) => f.endsWith('.js'))
  .map((f) => [f.slice(0, -3), readFileSync(path.join(casesDir, f), 'utf8')]));

// What the tests cannot say. status: supported | partial | not yet | by design.
const NOTES = {
  Request: { status: 'supported', note: 'A body over 1 MiB (or chunked) streams into `request.body` as it arrives; a smaller one has arrived before fetch() runs.' },
  Response: { status: 'supported', note: 'A body stream still being produced goes to the client chunk by chunk (chunked transfer coding); a complete body goes out with a Content-Length.' },
  fetch: { status: 'not compared', tests: [], note: 'Outbound requests go through the egress process (docs/workers.md); the differential run has no network, so fetch() is not compared here.' },
  ReadableStream: { status: 'partial', note: 'No BYOB readers (`getReader({mode: "byob"})` throws); default readers, tee, pipes and async iteration are complete.' },
  ReadableStreamBYOBReader: { status: 'not yet' },
  TextDecoder: { status: 'partial', note: 'UTF-8, UTF-16LE/BE, the 28 single-byte encodings of the Encoding Standard and x-user-defined; the multi-byte legacy encodings (Shift_JIS, EUC-JP, ISO-2022-JP, GBK, gb18030, Big5, EUC-KR) not yet.' },
  TextDecoderStream: { status: 'partial', note: 'The encodings of TextDecoder.' },
  CompressionStream: { note: 'zlib from Debian: the compressed bytes differ from workerd\'s (Chromium zlib), the data does not.' },
  URL: { note: '`URL.createObjectURL` / `revokeObjectURL` are not there (workerd has them).' },
  URLPattern: { note: 'The current URL Pattern standard, which this workerd version predates in places (see the differences below).' },
  structuredClone: { note: 'The transfer list takes ArrayBuffers only (there are no message ports).' },
  crypto: { note: '`crypto.DigestStream` as in workerd.' },
  SubtleCrypto: { note: 'OpenSSL 3 (the libcrypto libnode loads); algorithms in the table below. Work one call does is bounded (PBKDF2 up to 100,000 iterations, generated RSA keys up to 4096 bits): the CPU limit cannot interrupt a native call.' },
  navigator: { note: '`navigator.userAgent` is "edgenode"; no `sendBeacon`.' },
  console: { note: 'Output goes to the node\'s JSON log lines with the request id.' },
  caches: { status: 'not yet' },
  Cache: { status: 'not yet' },
  CacheStorage: { status: 'not yet' },
  WebSocket: { status: 'not yet' },
  HTMLRewriter: { status: 'not yet' },
  EventSource: { status: 'not yet' },
  WebAssembly: { note: 'Also compiles from bytes (`compile`, `instantiate`, `new WebAssembly.Module`), which workerd refuses ("Wasm code generation disallowed by embedder"); `compileStreaming` and `instantiateStreaming`, which this workerd lacks, read the whole Response first. Memories count against the memory limit ([workers.md](workers.md#webassembly)).' },
  MessageChannel: { status: 'not yet' },
  MessagePort: { status: 'not yet' },
};

function md(s) {
  return String(s).replace(/\|/g, '\\|');
}

function code(s) {
  return `\`${s}\``;
}

const surfaceEntry = compat.cases.find((c) => c.case === 'api-surface');
if (!surfaceEntry || !surfaceEntry.bodies) {
  console.error('the results have no api-surface answers: rerun tests/e2e/compat.test.mjs');
  process.exit(1);
}
const surface = {
  workerd: JSON.parse(surfaceEntry.bodies.workerd),
  edgenode: JSON.parse(surfaceEntry.bodies.edgenode),
};

// The cases that use an API, by its name in their source.
function testedBy(name) {
  if (NOTES[name] && NOTES[name].tests) return NOTES[name].tests;
  const re = new RegExp(`(^|[^A-Za-z0-9_$.'-])${name.replace(/[.$]/g, '\\$&')}(?![-\\w])`);
  return Object.keys(caseSources)
    .filter((c) => c !== 'api-surface' && c !== 'globals' && c !== 'globals-workers-only' && re.test(caseSources[c]))
    .sort();
}

function statusOf(name, present) {
  const note = NOTES[name];
  if (note && note.status) return note.status;
  return present ? 'supported' : 'not yet';
}

const lines = [];
const push = (...l) => lines.push(...l);

const counts = { equal: 0, 'known-difference': 0, different: 0 };
for (const r of compat.cases) counts[r.outcome] = (counts[r.outcome] ?? 0) + 1;
const caseCount = new Set(compat.cases.map((r) => r.case)).size;

push('# Web platform compatibility', '',
  '<!-- Generated by tests/compat/gen-compat-doc.mjs from the test results; do not edit. -->', '',
  'Scripts written for Cloudflare Workers, Deno or the WinterTC minimum common API run here',
  'unchanged. Two referees decide what correct means: the web-platform-tests vectors, and',
  `workerd itself (npm \`workerd@${compat.workerd}\`), which runs every script of`,
  '`tests/compat/cases/` beside edgenode with the same requests. This page is generated from their',
  'results (`node tests/compat/gen-compat-doc.mjs` after `ctest -R "wpt_url|compat"`).', '');

push('## Summary', '',
  '| Referee | edgenode | workerd |', '|---|---|---|');
for (const kind of ['urltestdata', 'setters', 'toascii']) {
  const e = wpt[kind];
  const w = wpt[`workerd-${kind}`];
  if (!e) continue;
  push(`| WPT ${code(`url/resources/${e.file}`)} | ${e.passed} / ${e.total} | ${w ? `${w.passed} / ${w.total}` : 'not run'} |`);
}
push(`| Differential: ${caseCount} scripts, ${compat.cases.length} requests | ${counts.equal} answers equal to workerd's byte for byte, ${counts['known-difference']} known differences (below), ${counts.different} unexpected | reference |`, '');

push('## Globals', '',
  'Status: **supported** (present and agreeing with workerd in every test that uses it, or',
  'differing only where listed below), **partial** (present with the limits noted), **not yet**,',
  '**by design** (left out on purpose). "Tested by" names the differential cases that use it.', '',
  '| Global | Status | workerd | Tested by | Notes |', '|---|---|---|---|---|');
const globalNames = Object.keys(surface.edgenode.globals)
  .filter((g, i, all) => all.indexOf(g) === i && g !== 'DigestStream');
for (const g of globalNames) {
  const e = surface.edgenode.globals[g];
  const w = surface.workerd.globals[g];
  if (e === 'undefined' && w === 'undefined') continue;
  const tests = testedBy(g);
  push(`| ${code(g)} | ${statusOf(g, e !== 'undefined')} | ${w === 'undefined' ? 'no' : 'yes'} | ${tests.slice(0, 6).join(', ')}${tests.length > 6 ? `, +${tests.length - 6}` : ''} | ${md(NOTES[g]?.note ?? '')} |`);
}
push('');

push('## Interfaces', '',
  'Members (static and prototype, inherited ones included) each platform has; where the lists',
  'differ, the difference is named.', '',
  '| Interface | Members on both | Only edgenode | Only workerd |', '|---|---|---|---|');
for (const name of Object.keys(surface.edgenode.members)) {
  const e = surface.edgenode.members[name];
  const w = surface.workerd.members[name];
  if (e === null && w === null) continue;
  const es = new Set(e ?? []);
  const ws = new Set(w ?? []);
  const both = [...es].filter((m) => ws.has(m));
  const onlyE = [...es].filter((m) => !ws.has(m));
  const onlyW = [...ws].filter((m) => !es.has(m));
  push(`| ${code(name)} | ${both.length} | ${onlyE.map(code).join(', ') || '—'} | ${onlyW.map(code).join(', ') || '—'} |`);
}
push('', 'Members that only edgenode lists are often instance properties in workerd (`CryptoKey.type`,',
  '`DOMException.code`, `navigator.userAgent`), present on both; the differential cases check their values.', '');

const algEntry = compat.cases.find((c) => c.case === 'crypto-algorithms');
if (algEntry && algEntry.bodies) {
  const e = JSON.parse(algEntry.bodies.edgenode);
  const w = JSON.parse(algEntry.bodies.workerd);
  push('## crypto.subtle algorithms', '',
    'From the `crypto-algorithms` case; every algorithm is then exercised for its operations',
    '(sign/verify, encrypt/decrypt, derive, import/export in raw, jwk, spki and pkcs8) by the',
    '`crypto-*` cases.', '',
    '| Operation | Algorithm | edgenode | workerd |', '|---|---|---|---|');
  for (const op of Object.keys(e)) {
    for (const alg of Object.keys(e[op])) push(`| ${op} | ${alg} | ${e[op][alg]} | ${w[op]?.[alg] ?? '—'} |`);
  }
  push('', 'Also: `deriveBits`/`deriveKey` with PBKDF2, HKDF, ECDH and X25519; `wrapKey`/`unwrapKey`;',
    'P-384 and P-521 curves; `crypto.subtle.timingSafeEqual` and `crypto.DigestStream` as in workerd.', '');
}

push('## Known differences from workerd', '',
  'Each is listed in `tests/compat/differences.json` with its reason; the test fails on any other',
  'difference, and on a listed one that has gone away.', '',
  '| Case | Requests | May differ in | Reason |', '|---|---|---|---|');
for (const [key, entry] of Object.entries(differences)) {
  if (key === 'comment') continue;
  const [name, index] = key.split('#');
  const rs = compat.cases.filter((r) => r.case === name && (index === undefined || String(r.request) === index));
  const labels = rs.map((r) => r.label).join(', ');
  push(`| ${code(name)} | ${md(labels)} | ${entry.ignore.join(', ')} | ${md(entry.reason)} |`);
}
push('');

push('## WPT URL vectors', '',
  'Every vector of `urltestdata.json`, `setters_tests.json` and `toascii.json` runs inside a real',
  'isolate of a real edgenode (`tests/e2e/wpt_url.test.mjs`); expected failures are listed with a',
  'reason in `tests/compat/expected-failures.json`, and that list only shrinks.', '');
for (const kind of ['urltestdata', 'setters', 'toascii']) {
  const e = wpt[kind];
  const w = wpt[`workerd-${kind}`];
  if (!e) continue;
  push(`- ${code(e.file)}: edgenode ${e.passed}/${e.total}${e.failed.length ? ` (failing: ${e.failed.map(code).join(', ')})` : ''}` +
    `${w ? `; workerd ${w.passed}/${w.total}` : ''}`);
}
push('');

writeFileSync(out, `${lines.join('\n')}\n`);
console.log(`wrote ${path.relative(root, out)}`);

// The link to NATS, secured: a three-server cluster that requires TLS (a CA
// and certificates made by openssl here) and one in operator mode that
// requires a user's credentials (NKEYs and JWTs made here, as nsc would).
// Nodes with the right CA or .creds file form a fleet; a node with the
// wrong ones stays out, says why in its log, /readyz and GET /v1/fleet, and
// refuses control writes.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { EDGENODE, runProcess, tempDir } from '../e2e/lib/node.mjs';
import { makeCa, makeOperator, makeServerCert, nkey } from './lib/nats-auth.mjs';
import { startFleetNode, startNats, waitFor } from './lib/fleet.mjs';

const worker = (text) => `export default { fetch() { return new Response(${JSON.stringify(text)}); } };`;

async function waitReady(node) {
  await waitFor(async () => (await node.control('GET', '/readyz', { token: null })).status === 200,
    { timeout: 20000, what: `node on ${node.controlPort} ready` });
}

async function served(node, name, text) {
  await waitFor(async () => {
    const r = await node.ingress(name, '/', { timeout: 3000 });
    return r.status === 200 && r.text === text;
  }, { timeout: 10000, what: `${name} served on ${node.controlPort}` });
}

// A node that cannot connect: it says `pattern` in an error log line, in
// /readyz and in GET /v1/fleet, and answers control writes 503.
async function assertLockedOut(node, pattern) {
  const line = await node.waitForLog((l) => l.json?.level === 'error' && /^fleet: cannot connect to NATS: /.test(l.json.msg),
    { timeout: 15000, what: 'the fleet link error in the log' });
  assert.match(line.json.msg, pattern);
  const ready = await node.control('GET', '/readyz', { token: null });
  assert.equal(ready.status, 503, ready.text);
  assert.match(ready.json.error, /^the fleet is unreachable and this node has never been in sync: /);
  assert.match(ready.json.error, pattern);
  const f = await node.control('GET', '/v1/fleet');
  assert.equal(f.status, 200, f.text);
  assert.equal(f.json.connected, false);
  assert.match(f.json.error, pattern);
  const d = await node.deploy('locked', worker('never'));
  assert.equal(d.status, 503, d.text);
  assert.deepEqual(d.json, { error: 'fleet unavailable' });
  console.log(`${node.args[node.args.indexOf('--node-name') + 1]}: ${line.json.msg}`);
  return line.json.msg;
}

describe('TLS to NATS', () => {
  const dir = tempDir('edgenode-fleet-tls-');
  let nats;
  let ca;
  const nodes = [];

  before(async () => {
    ca = makeCa(dir, 'fleet-ca');
    const server = makeServerCert(dir, 'nats-server', ca);
    nats = await startNats(3, {
      scheme: 'tls',
      config: `tls {\n  cert_file: "${server.cert}"\n  key_file: "${server.key}"\n}\n`,
    });
  });

  after(async () => {
    for (const n of nodes) await n.stop().catch(() => {});
    await nats?.stop();
  });

  test('nodes with --fleet-ca and tls:// URLs form a fleet over TLS', async () => {
    for (let i = 1; i <= 2; i++) nodes.push(await startFleetNode(`tls${i}`, nats, { extraArgs: ['--fleet-ca', ca.cert] }));
    await Promise.all(nodes.map(waitReady));
    const r = await nodes[0].deploy('overtls', worker('over TLS'));
    assert.equal(r.status, 201, r.text);
    for (const n of nodes) await served(n, 'overtls', 'over TLS');
    const f = await nodes[1].control('GET', '/v1/fleet');
    assert.equal(f.json.connected, true);
    assert.match(f.json.server, /^tls:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(f.json.error, undefined);
  });

  test('a node with another CA stays out and says the certificate is not trusted', async () => {
    const other = makeCa(dir, 'other-ca');
    const node = await startFleetNode('tls-wrong', nats, { extraArgs: ['--fleet-ca', other.cert] });
    nodes.push(node);
    const msg = await assertLockedOut(node, /SSL Error: .*(unable to get local issuer certificate|certificate verify failed)/);
    assert.match(msg, /\(check --fleet-ca and the servers' certificates\)$/);
  });

  test('a --fleet-ca file that holds no certificate is refused at start', async () => {
    const bad = path.join(dir, 'not-a-ca.pem');
    writeFileSync(bad, 'not a certificate\n');
    const r = await runProcess(EDGENODE, ['--listen', '127.0.0.1:0', '--control', '127.0.0.1:0',
      '--data', tempDir(), '--fleet', nats.urls, '--fleet-ca', bad]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /fleet: NATS options: .*not-a-ca\.pem/);
  });
});

describe('credentials for NATS in operator mode', () => {
  const dir = tempDir('edgenode-fleet-creds-');
  let nats;
  let op;
  const nodes = [];

  before(async () => {
    op = makeOperator(dir);
    nats = await startNats(3, { config: op.config });
  });

  after(async () => {
    for (const n of nodes) await n.stop().catch(() => {});
    await nats?.stop();
  });

  test('nodes with a user\'s .creds file (--fleet-creds) form a fleet', async () => {
    for (let i = 1; i <= 2; i++) {
      nodes.push(await startFleetNode(`creds${i}`, nats, { extraArgs: ['--fleet-creds', op.creds(`node${i}`)] }));
    }
    await Promise.all(nodes.map(waitReady));
    const r = await nodes[1].deploy('withcreds', worker('with credentials'));
    assert.equal(r.status, 201, r.text);
    for (const n of nodes) await served(n, 'withcreds', 'with credentials');
  });

  test('a node whose credentials the servers do not trust stays out and says so', async () => {
    // A user signed by an account that no server knows.
    const creds = op.creds('stranger', nkey('account'));
    const node = await startFleetNode('creds-wrong', nats, { extraArgs: ['--fleet-creds', creds] });
    nodes.push(node);
    const msg = await assertLockedOut(node, /Authorization Violation/);
    assert.match(msg, /\(check --fleet-creds and the servers' authorization\)$/);
  });

  test('a node without credentials stays out and says so', async () => {
    const node = await startFleetNode('creds-none', nats);
    nodes.push(node);
    await assertLockedOut(node, /Authorization Violation/);
  });

  test('a --fleet-creds file that is not a .creds file is refused at start', async () => {
    const bad = path.join(dir, 'password.txt');
    writeFileSync(bad, 'user:password\n', { mode: 0o600 });
    const r = await runProcess(EDGENODE, ['--listen', '127.0.0.1:0', '--control', '127.0.0.1:0',
      '--data', tempDir(), '--fleet', nats.urls, '--fleet-creds', bad]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /fleet: credentials file .*password\.txt: not a NATS \.creds file \(a user JWT and its NKEY seed/);
    const missing = await runProcess(EDGENODE, ['--listen', '127.0.0.1:0', '--control', '127.0.0.1:0',
      '--data', tempDir(), '--fleet', nats.urls, '--fleet-creds', path.join(dir, 'missing.creds')]);
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /fleet: credentials file .*missing\.creds: No such file or directory/);
  });
});

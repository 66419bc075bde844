// An election forced for real: the NATS server that leads the records
// stream (EDGENODE_RECORDS, as the servers' monitoring endpoint says) is
// SIGKILLed, and deploys issued on every node right after it ride through
// the election (the write deadline, 15 s) instead of failing, each landing
// as exactly one new version; every node converges on them.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { httpRequest } from '../e2e/lib/node.mjs';
import { servedBody, startFleetNode, startNats, waitFor, waitReady } from './lib/fleet.mjs';

const worker = (text) => `export default { fetch() { return new Response(${JSON.stringify(text)}); } };`;

// A deploy whose answer may take the whole write deadline: the client waits
// longer than the node's 15 s, so that what is seen is the node's answer.
function deploy(node, name, code) {
  return httpRequest({
    port: node.controlPort, method: 'PUT', path: `/v1/workers/${name}`, body: code, timeout: 30000,
    headers: { authorization: `Bearer ${node.token}`, 'content-type': 'application/javascript' },
  });
}

describe('the leader of the records stream is killed', () => {
  let nats;
  const nodes = [];

  before(async () => {
    nats = await startNats(3);
    for (let i = 1; i <= 3; i++) nodes.push(await startFleetNode(`node${i}`, nats));
    await Promise.all(nodes.map(waitReady));
  });

  after(async () => {
    for (const n of nodes) await n.stop().catch(() => {});
    await nats?.stop();
  });

  test('deploys issued right after ride through the election, one new version each, and every node converges', async () => {
    const names = nodes.map((_, i) => `elect${i + 1}`);
    for (const name of names) await nodes[0].deployOk(name, worker(`${name} v1`));
    for (const n of nodes) {
      for (const name of names) {
        await waitFor(async () => (await servedBody(n, name)) === `200 ${name} v1`,
          { timeout: 5000, what: `${name} v1 on ${n.controlPort}` });
      }
    }
    const retriesBefore = await Promise.all(nodes.map(async (n) => (await n.control('GET', '/v1/fleet')).json.writes.retries));
    const leader = await waitFor(async () => {
      const i = await nats.streamLeader('EDGENODE_RECORDS');
      return i >= 0 ? { i } : null;
    }, { timeout: 10000, what: 'the stream leader' });
    // which server each node is connected to, by name (the leader's lose theirs too)
    const connected = await Promise.all(nodes.map(async (n) => {
      const url = (await n.control('GET', '/v1/fleet')).json.server;
      return nats.servers.find((s) => url.endsWith(`:${s.port}`))?.name ?? url;
    }));

    await nats.kill(leader.i);
    const killedAt = Date.now();
    // One deploy on every node at once, each of its own worker.
    const results = await Promise.all(nodes.map(async (n, i) => {
      const r = await deploy(n, names[i], worker(`${names[i]} v2`));
      return { r, ms: Date.now() - killedAt };
    }));
    for (const [i, { r }] of results.entries()) {
      assert.equal(r.status, 200, `the deploy on node ${i + 1}: ${r.text}`);
      assert.equal(r.json.version, 2, r.text);
    }
    const retriesAfter = await Promise.all(nodes.map(async (n) => (await n.control('GET', '/v1/fleet')).json.writes.retries));
    const retried = retriesAfter.reduce((a, b) => a + b, 0) - retriesBefore.reduce((a, b) => a + b, 0);
    assert.ok(retried > 0, 'the writes met the election (they had to be tried again)');
    const newLeader = await waitFor(async () => {
      const i = await nats.streamLeader('EDGENODE_RECORDS');
      return i >= 0 ? { i } : null;
    }, { timeout: 20000, what: 'a new stream leader' });
    assert.notEqual(newLeader.i, leader.i);
    console.log(`leader n${leader.i} killed (nodes were on ${connected.join(', ')}); deploys answered after `
      + `${results.map((x) => x.ms).join(', ')} ms with ${retried} retries; new leader n${newLeader.i}`);

    // Every node: each worker at version 2 exactly, with two versions in its
    // history (a retry that wrote twice would show a third), serving v2.
    for (const n of nodes) {
      for (const name of names) {
        await waitFor(async () => (await servedBody(n, name)) === `200 ${name} v2`,
          { timeout: 10000, what: `${name} v2 on ${n.controlPort}` });
        const v = await n.control('GET', `/v1/workers/${name}/versions`);
        assert.equal(v.status, 200, v.text);
        assert.equal(v.json.current, 2, v.text);
        assert.deepEqual(v.json.versions.map((x) => x.version), [2, 1], v.text);
      }
    }
    await waitFor(async () => (await nodes[0].control('GET', '/v1/fleet')).json.nodes.every((m) => m.behind === 0),
      { timeout: 10000, what: 'no node behind' });

    // The killed server comes back and catches up; the next write lands once.
    await nats.start(leader.i);
    const r = await deploy(nodes[1], names[0], worker(`${names[0]} v3`));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.version, 3);
    for (const n of nodes) {
      await waitFor(async () => (await servedBody(n, names[0])) === `200 ${names[0]} v3`,
        { timeout: 10000, what: `v3 on ${n.controlPort}` });
    }
  });
});

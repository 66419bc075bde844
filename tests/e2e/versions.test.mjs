// Versions and rollbacks: the registry keeps each worker's last 20 versions
// (code and spec), lists them, and a rollback makes a new version from an
// old one that reaches the worker processes as a deploy does.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { startNode } from './lib/node.mjs';

const say = (text) => `export default { fetch() { return new Response(${JSON.stringify(text)}); } };\n`;

describe('versions and rollback', () => {
  let node;
  before(async () => { node = await startNode({ workers: 2 }); });
  after(() => node.stop({ clean: true }));

  const versions = (name) => node.control('GET', `/v1/workers/${name}/versions`);
  const rollback = (name, body) => node.control('POST', `/v1/workers/${name}/rollback`, { body });

  test('each deploy is listed, newest first, with its size, main module and hash', async () => {
    await node.deployOk('app', { 'index.js': say('one') }, { json: true, limits: { cpu_ms: 40 } });
    await node.deployOk('app', { 'index.js': say('two'), 'util.js': 'export const x = 1;\n' });
    await node.deployOk('app', { 'index.js': say('one') }, { json: true, limits: { cpu_ms: 40 } });
    const r = await versions('app');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.name, 'app');
    assert.equal(r.json.current, 3);
    assert.equal(r.json.kept, 20);
    assert.deepEqual(r.json.versions.map((v) => v.version), [3, 2, 1]);
    const [v3, v2, v1] = r.json.versions;
    assert.equal(v1.main_module, 'index.js');
    assert.deepEqual(v2.modules, ['index.js', 'util.js']);
    assert.equal(v1.size, Buffer.byteLength(say('one')));
    assert.equal(v2.size, Buffer.byteLength(say('two')) + Buffer.byteLength('export const x = 1;\n'));
    assert.match(v1.hash, /^[0-9a-f]{64}$/);
    assert.equal(v3.hash, v1.hash, 'the same code hashes the same');
    assert.notEqual(v2.hash, v1.hash);
    assert.ok(!Number.isNaN(Date.parse(v1.created_at)), v1.created_at);
    assert.equal(v1.rollback_of, undefined);
  });

  test('a rollback makes a new version with the old code and spec, served at once', async () => {
    assert.equal((await node.ingress('app', '/')).text, 'one');
    const r = await rollback('app', { version: 2 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.version, 4);
    assert.equal(r.json.rollback_of, 2);
    assert.deepEqual(r.json.modules, ['index.js', 'util.js']);
    // every worker process hears of it as of a deploy: each serves version 4
    for (let i = 0; i < 8; i++) assert.equal((await node.ingress('app', '/')).text, 'two');
    const w = await node.control('GET', '/v1/workers/app');
    assert.equal(w.json.version, 4);
    const list = (await versions('app')).json;
    assert.equal(list.current, 4);
    assert.equal(list.versions[0].rollback_of, 2);
    assert.equal(list.versions[0].hash, list.versions.find((v) => v.version === 2).hash);

    // back to 1: its limits come back with its code
    const back = await rollback('app', { version: 1 });
    assert.equal(back.status, 200, back.text);
    assert.equal(back.json.version, 5);
    assert.equal(back.json.limits.cpu_ms, 40);
    assert.equal((await node.ingress('app', '/')).text, 'one');
    const ev = (await node.control('GET', '/v1/events?kind=rollback')).json.events;
    const seen = ev.map((e) => [e.tenant, e.details.version, e.details.rollback_of]);
    assert.deepEqual(seen.sort((a, b) => a[1] - b[1]), [['app', 4, 2], ['app', 5, 1]]);
  });

  test('a version that carried egress rules brings them back', async () => {
    const rulesA = [{ match: 'https://a.example.com/*' }];
    const rulesB = [{ match: 'https://b.example.com/*' }];
    await node.deployOk('egr', say('a'), { json: true, egress: rulesA });
    await node.deployOk('egr', say('b'), { json: true, egress: rulesB });
    const list = (await versions('egr')).json.versions;
    assert.deepEqual(list.map((v) => v.egress), [true, true]);
    const r = await rollback('egr', { version: 1 });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual((await node.control('GET', '/v1/workers/egr/egress')).json.rules, rulesA);
    assert.equal((await node.ingress('egr', '/')).text, 'a');
  });

  test('bad rollbacks get clear errors and change nothing', async () => {
    const before = (await versions('app')).json;
    const cases = [
      [{}, 400, /name the version/],
      [{ version: 'two' }, 400, /positive integer/],
      [{ version: 0 }, 400, /positive integer/],
      [{ version: 1.5 }, 400, /positive integer/],
      ['not json', 400, /must be JSON/],
      [{ version: 99 }, 404, /version 99 of worker app is not kept/],
      [{ version: 5 }, 409, /current one/],
    ];
    for (const [body, status, msg] of cases) {
      const r = await rollback('app', body);
      assert.equal(r.status, status, `${JSON.stringify(body)}: ${r.text}`);
      assert.match(r.json.error, msg);
    }
    const missing = await rollback('app', { version: 99 });
    assert.deepEqual(missing.json.kept, [5, 4, 3, 2, 1]);
    assert.deepEqual((await versions('app')).json, before);

    const unknown = await rollback('nosuch', { version: 1 });
    assert.equal(unknown.status, 404, unknown.text);
    assert.equal((await versions('nosuch')).status, 404);
    assert.equal((await node.control('GET', '/v1/workers/app/rollback')).status, 405);
    assert.equal((await node.control('POST', '/v1/workers/app/versions')).status, 405);
    assert.equal((await node.control('GET', '/v1/workers/Bad_Name!/versions')).status, 400);
  });

  test('only the last 20 versions are kept, and a delete takes them with it', async () => {
    for (let i = 1; i <= 22; i++) await node.deployOk('many', say(`v${i}`));
    const list = (await versions('many')).json;
    assert.equal(list.versions.length, 20);
    assert.equal(list.versions[0].version, 22);
    assert.equal(list.versions[19].version, 3);
    const gone = await rollback('many', { version: 2 });
    assert.equal(gone.status, 404, gone.text);
    const r = await rollback('many', { version: 3 });
    assert.equal(r.status, 200, r.text);
    assert.equal((await node.ingress('many', '/')).text, 'v3');
    assert.equal((await versions('many')).json.versions.length, 20);

    assert.equal((await node.control('DELETE', '/v1/workers/many')).status, 200);
    assert.equal((await versions('many')).status, 404);
    const again = await node.deployOk('many', say('fresh'));
    assert.equal(again.json.version, 24, 'versions never repeat, not even across a delete');
    assert.deepEqual((await versions('many')).json.versions.map((v) => v.version), [24]);
  });
});

// A loader child's globalOutbound naming an egress policy: the child's
// fetch() goes out under that policy's rules and secret grants, if the
// parent may use it (its own, or one its loader binding grants).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import { startNode, echoUpstream } from './lib/node.mjs';

let node;
let upstream;
let P;
const TOKEN = `tok-${randomBytes(8).toString('hex')}`;

before(async () => {
  upstream = await echoUpstream();
  P = upstream.address().port;
  node = await startNode({ workers: 1, extraArgs: ['--egress-allow-cidr', '127.0.0.1/32'] });
  // "tools": a policy (a worker's egress rules) reaching /tool/* with a secret.
  const TOOLS = 'export default { fetch() { return new Response("tools"); } };';
  await node.deployOk('tools', TOOLS, { json: true });
  const s = await node.control('PUT', '/v1/secrets/TOOL_TOKEN', { body: { value: TOKEN, workers: ['tools'] } });
  assert.equal(s.status, 201, s.text);
  await node.deployOk('tools', TOOLS, {
    json: true,
    egress: [{ match: `http://127.0.0.1:${P}/tool/*`,
      inject: { headers: { Authorization: 'Bearer ${secret:TOOL_TOKEN}' } } }],
  });
  await node.deployOk('other', 'export default { fetch() { return new Response("other"); } };', { json: true });
  // The parent: its children's globalOutbound comes from ?policy=.
  await node.deployOk('parent', PARENT, { json: true,
    bindings: { LOADER: { type: 'loader', policies: ['tools'] } } });
});

after(async () => {
  try {
    if (node) {
      for (const l of node.logs) assert.ok(!l.raw.includes(TOKEN), `a log line holds the secret: ${l.raw}`);
      await node.stop({ clean: true });
    }
  } finally {
    upstream?.close();
  }
});

const CHILD = `export default { async fetch(request) {
  const target = new URL(request.url).searchParams.get('url');
  try {
    const r = await fetch(target);
    return Response.json({ status: r.status, body: await r.json() });
  } catch (err) {
    return Response.json({ error: String(err) });
  }
} };`;

const PARENT = `export default { async fetch(request, env) {
  const u = new URL(request.url);
  const code = { compatibilityDate: '2025-06-01', mainModule: 'c.js',
    modules: { 'c.js': ${JSON.stringify(CHILD)} }, globalOutbound: u.searchParams.get('policy') };
  try {
    const stub = env.LOADER.load(code);
    const r = await stub.getEntrypoint().fetch('http://child/?url=' + encodeURIComponent(u.searchParams.get('url')));
    return new Response(await r.text(), { headers: { 'content-type': 'application/json' } });
  } catch (err) {
    return Response.json({ thrown: String(err) }, { status: 500 });
  }
} };`;

function ask(policy, url) {
  const q = `?policy=${encodeURIComponent(policy)}&url=${encodeURIComponent(url)}`;
  return node.ingress('parent', `/${q}`);
}

test('a child under a granted policy reaches its upstream with the secret injected', async () => {
  const r = await ask('tools', `http://127.0.0.1:${P}/tool/weather`);
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json, { status: 200, body: { path: '/tool/weather', authorization: `Bearer ${TOKEN}` } });
});

test('a host or path the policy does not allow is refused in the child', async () => {
  const r = await ask('tools', `http://127.0.0.1:${P}/admin`);
  assert.equal(r.status, 200, r.text);
  assert.match(r.json.error, /egress denied/);
});

test('the parent\'s own policy needs no grant (and the parent has no rules: denied)', async () => {
  const r = await ask('parent', `http://127.0.0.1:${P}/tool/weather`);
  assert.equal(r.status, 200, r.text);
  assert.match(r.json.error, /egress denied/);
});

test('an ungranted or unknown policy fails the child\'s creation, naming it', async () => {
  for (const policy of ['other', 'no-such-worker']) {
    const r = await ask(policy, `http://127.0.0.1:${P}/tool/weather`);
    assert.equal(r.status, 500, r.text);
    assert.match(r.json.thrown, new RegExp(`egress policy "${policy}" is not granted to this worker`));
    assert.match(r.json.thrown, /bindings\.LOADER\.policies grants \["tools"\]/);
  }
});

test('a malformed policies list is a 400 at deploy', async () => {
  for (const policies of ['tools', [1], ['Bad Name'], Array(17).fill('a')]) {
    const r = await node.deploy('bad-parent', PARENT, { json: true,
      bindings: { LOADER: { type: 'loader', policies } } });
    assert.equal(r.status, 400, r.text);
    assert.match(r.json.error, /bindings: "LOADER": "policies" must/);
  }
  const r = await node.deploy('bad-parent', PARENT, { json: true,
    bindings: { T: { type: 'text', value: 'x', policies: ['tools'] } } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.error, /unknown member/);
});

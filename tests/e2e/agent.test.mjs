// examples/agent: the agent loop against a real node. Each step runs in a
// fresh sandbox (POST /v1/run) with a tool reached only through the egress
// (which injects the tool's token) and a memory kept in a named facet; one
// step fails the way generated code does and is retried from its error.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { SOURCE_DIR, startNode } from './lib/node.mjs';

const { Edgenode } = await import(pathToFileURL(path.join(SOURCE_DIR, 'clients', 'js', 'edgenode.mjs')).href);
const { runAgent } = await import(pathToFileURL(path.join(SOURCE_DIR, 'examples', 'agent', 'agent.mjs')).href);

const TOKEN = `wx-${randomBytes(8).toString('hex')}`;
const TEMPS = { Oslo: 4, Lisbon: 19, Cairo: 31 };
const toolCalls = [];
let tool;
let toolPort;
let node;
let client;

before(async () => {
  tool = http.createServer((req, res) => {
    const url = new URL(req.url, 'http://x');
    const city = url.searchParams.get('city');
    toolCalls.push({ path: url.pathname, city, auth: req.headers.authorization });
    if (req.headers.authorization !== `Bearer ${TOKEN}`) {
      res.writeHead(401).end('{"error":"no token"}');
      return;
    }
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ city, temp_c: TEMPS[city] ?? null }));
  });
  await new Promise((resolve) => tool.listen(0, '127.0.0.1', resolve));
  toolPort = tool.address().port;
  node = await startNode({ workers: 1, extraArgs: ['--egress-allow-cidr', '127.0.0.1/32'] });
  client = new Edgenode({ url: `http://127.0.0.1:${node.controlPort}`, token: node.token });
  // The worker whose grants the agent's runs borrow ("as"): it holds the
  // tool's credential; its own code is irrelevant.
  await client.deploy('agent-tools', { code: 'export default { fetch() { return new Response("tools"); } };' });
  await client.putSecret('WEATHER_TOKEN', TOKEN, { workers: ['agent-tools'] });
});

after(async () => {
  if (node) await node.stop();
  if (tool) tool.close();
});

test('the agent answers from its memory after calling the tool through the egress', async () => {
  const out = await runAgent({
    client, tool: `http://127.0.0.1:${toolPort}`, as: 'agent-tools', facet: 'agent-e2e',
    cities: Object.keys(TEMPS),
  });
  assert.equal(out.answer, 'The warmest of them is Cairo at 31 °C.');
  // the tool was called once per city, always with the injected token
  const weather = toolCalls.filter((c) => c.path === '/weather');
  assert.deepEqual(weather.map((c) => c.city), ['Oslo', 'Lisbon', 'Cairo']);
  assert.ok(weather.every((c) => c.auth === `Bearer ${TOKEN}`));
  // the failed step was reported with its place, then retried
  const failed = out.steps.filter((s) => !s.ok);
  assert.equal(failed.length, 1);
  assert.match(failed[0].error, /no such table: notez/);
  // the tool step's console lines came back with the run
  const lookups = out.steps.find((s) => s.goal.startsWith('ask the weather tool'));
  assert.equal(lookups.logs.filter((l) => /looked up/.test(l.message)).length, 3);
  // no sandbox ever saw the credential: not in any result or log line
  assert.ok(!JSON.stringify(out).includes(TOKEN));
  // the memory outlived every sandbox, and the operator can see and drop it
  const facets = await node.control('GET', '/v1/run/facets');
  assert.equal(facets.status, 200, facets.text);
  assert.ok(facets.json.facets.some((f) => f.id === 'agent-e2e'), facets.text);
  const del = await node.control('DELETE', '/v1/run/facets/agent-e2e');
  assert.equal(del.status, 200, del.text);
});

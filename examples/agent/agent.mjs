// An agent loop on edgenode: each step's code is "generated" (taken from a
// prepared list here: no model is needed to show the platform's side), run
// once in a fresh sandbox through POST /v1/run, with
//   - a tool API it reaches only through the egress, which injects the
//     tool's credential (the sandbox never sees it), and
//   - a memory that outlives every sandbox: a named facet, env.DB.
// The result of each step feeds the next, as a model's next prompt would.
//
//   node examples/agent/agent.mjs --url http://127.0.0.1:8081 --token-file data/control.token \
//        --tool http://127.0.0.1:9000 --as agent-tools
//
// The tool's credential is a secret granted to the worker named by --as
// (the run borrows that worker's grants: docs/control-api.md, /v1/run).
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const { Edgenode, CodeError } = await import(pathToFileURL(path.join(here, '..', '..', 'clients', 'js', 'edgenode.mjs')).href);

// What a model would write at each step. Each is a module exporting
// run(input, env); input carries the tool's address and the last answer.
export const STEPS = [
  {
    goal: 'remember which cities to look at',
    code: `export function run(input, env) {
  env.DB.exec('CREATE TABLE IF NOT EXISTS notes (k TEXT PRIMARY KEY, v TEXT)');
  env.DB.exec("INSERT OR REPLACE INTO notes VALUES ('cities', ?)", JSON.stringify(input.cities));
  return { remembered: input.cities.length };
}`,
  },
  {
    goal: 'ask the weather tool about each city and keep the answers',
    code: `export async function run(input, env) {
  const cities = JSON.parse(env.DB.exec("SELECT v FROM notes WHERE k = 'cities'").one().v);
  for (const city of cities) {
    const r = await fetch(input.tool + '/weather?city=' + encodeURIComponent(city));
    if (!r.ok) throw new Error('the tool answered ' + r.status);
    const w = await r.json();
    env.DB.exec("INSERT OR REPLACE INTO notes VALUES (?, ?)", 'weather:' + city, JSON.stringify(w));
    console.log('looked up', city, w.temp_c);
  }
  return { looked_up: cities.length };
}`,
  },
  {
    goal: 'this step is wrong the first time: a model makes mistakes',
    code: `export function run(input, env) {
  return env.DB.exec("SELECT v FROM notez").toArray();
}`,
    retry: `export function run(input, env) {
  const rows = env.DB.exec("SELECT k, v FROM notes WHERE k LIKE 'weather:%' ORDER BY k").toArray();
  const warmest = rows.map((r) => ({ city: r.k.slice(8), ...JSON.parse(r.v) }))
    .sort((a, b) => b.temp_c - a.temp_c)[0];
  env.DB.exec("INSERT OR REPLACE INTO notes VALUES ('answer', ?)", JSON.stringify(warmest));
  return warmest;
}`,
  },
  {
    goal: 'answer from memory alone',
    code: `export function run(input, env) {
  const a = JSON.parse(env.DB.exec("SELECT v FROM notes WHERE k = 'answer'").one().v);
  return 'The warmest of them is ' + a.city + ' at ' + a.temp_c + ' °C.';
}`,
  },
];

// Runs the loop; returns {answer, steps: [{goal, ok, result | error, logs}]}.
export async function runAgent({ client, tool, as, facet = 'agent-memory', cities, log = () => {} }) {
  const toolOrigin = new URL(tool).origin;
  const egress = [{
    match: `${toolOrigin}/weather`,
    methods: ['GET'],
    inject: { headers: { Authorization: 'Bearer ${secret:WEATHER_TOKEN}' } },
  }];
  const steps = [];
  let last = null;
  for (const step of STEPS) {
    const attempt = async (code) => client.run({
      code, input: { tool: toolOrigin, cities, last }, egress, as, facet, limits: { cpu_ms: 200 },
    });
    let answer;
    try {
      answer = await attempt(step.code);
    } catch (err) {
      if (!(err instanceof CodeError) || !step.retry) throw err;
      // What the model would be shown to correct itself: the error and where.
      const where = err.line ? ` at ${err.module}:${err.line}:${err.column}` : '';
      steps.push({ goal: step.goal, ok: false, error: `${err.message}${where}`, logs: err.body?.logs ?? [] });
      log(`step "${step.goal}" failed: ${err.message}${where}; retrying`);
      answer = await attempt(step.retry);
    }
    last = answer.result;
    steps.push({ goal: step.goal, ok: true, result: answer.result, logs: answer.logs ?? [], cpu_ms: answer.cpu_ms });
    log(`step "${step.goal}": ${JSON.stringify(answer.result)}`);
  }
  return { answer: last, steps };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const arg = (name, fallback) => {
    const i = process.argv.indexOf(`--${name}`);
    return i >= 0 ? process.argv[i + 1] : fallback;
  };
  const tokenFile = arg('token-file', 'data/control.token');
  const client = new Edgenode({ url: arg('url', 'http://127.0.0.1:8081'), token: readFileSync(tokenFile, 'utf8').trim() });
  const out = await runAgent({
    client, tool: arg('tool', 'http://127.0.0.1:9000'), as: arg('as', 'agent-tools'),
    cities: (arg('cities', 'Oslo,Lisbon,Cairo')).split(','), log: (l) => console.error(l),
  });
  console.log(out.answer);
}

// Many small tenants for the density benchmarks (idle-memory.sh, density.sh).
//
//   node tenants.mjs deploy CONTROL_PORT TOKEN PREFIX COUNT
//       deploys PREFIX0 .. PREFIX<COUNT-1>, each its own module answering its
//       own name, 16 deploys at a time; prints {"deployed":N,"seconds":S}
//   node tenants.mjs touch PORT PREFIX COUNT
//       requests each of them once through ingress (Host: PREFIX<i>.localhost),
//       16 at a time; prints {"ok":N,"failed":N,"seconds":S,"statuses":{...}}
import http from 'node:http';

const CONCURRENCY = 16;

function request(port, { method = 'GET', host, path = '/', headers = {}, body }) {
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, method, path,
      headers: { host, ...headers }, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
    });
    req.on('error', (err) => resolve({ status: 0, text: err.message }));
    req.setTimeout(120000, () => req.destroy(new Error('timeout')));
    if (body) req.write(body);
    req.end();
  });
}

// Runs job(i) for i in 0 .. count-1, `CONCURRENCY` at a time.
async function each(count, job) {
  let next = 0;
  const run = async () => {
    while (next < count) await job(next++);
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, count) }, run));
}

async function deploy(control, token, prefix, count) {
  let deployed = 0;
  await each(count, async (i) => {
    const name = `${prefix}${i}`;
    const body = JSON.stringify({
      modules: { 'index.js': `export default { fetch() { return new Response(${JSON.stringify(name)}); } };\n` },
    });
    const r = await request(control, { method: 'PUT', host: `127.0.0.1:${control}`,
      path: `/v1/workers/${name}`, body,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } });
    if (r.status >= 300) throw new Error(`deploying ${name}: ${r.status} ${r.text}`);
    deployed++;
  });
  return { deployed };
}

async function touch(port, prefix, count) {
  let ok = 0;
  const statuses = {};
  await each(count, async (i) => {
    const name = `${prefix}${i}`;
    const r = await request(port, { host: `${name}.localhost` });
    statuses[r.status] = (statuses[r.status] ?? 0) + 1;
    if (r.status === 200 && r.text === name) ok++;
  });
  return { ok, failed: count - ok, statuses };
}

const [cmd, ...args] = process.argv.slice(2);
const start = process.hrtime.bigint();
let out;
if (cmd === 'deploy') {
  out = await deploy(Number(args[0]), args[1], args[2], Number(args[3]));
} else if (cmd === 'touch') {
  out = await touch(Number(args[0]), args[1], Number(args[2]));
} else {
  console.error('usage: tenants.mjs deploy CONTROL_PORT TOKEN PREFIX COUNT | touch PORT PREFIX COUNT');
  process.exit(2);
}
out.seconds = Number(process.hrtime.bigint() - start) / 1e9;
console.log(JSON.stringify(out));

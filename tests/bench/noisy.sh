#!/usr/bin/env bash
# Noisy neighbour: the latency of a well-behaved tenant alone, and while 10
# other tenants in the same process run `while (true) {}` on every request,
# edgenode against workerd, same run.
#
# edgenode: one worker process; `steady` (examples/hello.js) and spin0 ..
# spin9, each spinning until its CPU limit (cpu_ms, default 50) answers 503.
# The spinners get SPIN_CONNECTIONS connections round-robin over the ten
# (`loadgen -n 10`), back to back, for the whole noisy run.
# workerd: the same steady module and one spinning worker in one `workerd
# serve` (it has no CPU limit: the first spinning request never ends).
#
# For each server, per round: loadgen -t1 -cC on steady for DURATION seconds
# alone, then again while the spinners run. Prints p50/p99 of both and the
# ratio noisy/alone (target for edgenode: p99 within 2x of alone).
#
# Environment: DURATION (seconds, 10), CONNECTIONS (steady's, 4),
# SPIN_CONNECTIONS (10), CPU_MS (the spinners' limit, 50), ROUNDS (3), and
# BUILD_DIR / BUILD, SKIP_BUILD=1, WORKERD.
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-4}
SPIN_CONNECTIONS=${SPIN_CONNECTIONS:-10}
CPU_MS=${CPU_MS:-50}
ROUNDS=${ROUNDS:-3}

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init noisy.sh noisy
bench_need cmake npm node curl setsid
bench_build edgenode edgenode-worker loadgen
loadgen=$build/bin/loadgen
bench_workerd

echo "machine: $(machine_desc)"
echo "workerd: $("$workerd" --version 2>&1 | head -1)"
echo "steady: $CONNECTIONS connections, $DURATION s per run, $ROUNDS rounds; spinners: 10 tenants, $SPIN_CONNECTIONS connections, cpu_ms $CPU_MS"
report_busy

mkdir -p "$tmp/workerd"
cp "$repo/examples/hello.js" "$tmp/workerd/steady.js"
cat >"$tmp/workerd/spin.js" <<'EOF'
export default { fetch() { while (true) {} } };
EOF

say "starting edgenode (1 worker process)"
edgenode_start "$(free_port)" "$(free_port)" --workers 1 --log-level warn
node - "$tmp" "$CPU_MS" <<'EOF'
const fs = require('fs');
const [dir, cpu] = process.argv.slice(2);
const one = (file, limits) => JSON.stringify({ modules: { 'index.js': fs.readFileSync(`${dir}/workerd/${file}`, 'utf8') }, limits });
fs.writeFileSync(`${dir}/steady.json`, one('steady.js', {}));
fs.writeFileSync(`${dir}/spin.json`, one('spin.js', { cpu_ms: Number(cpu) }));
EOF
edgenode_deploy steady "$tmp/steady.json"
for i in $(seq 0 9); do edgenode_deploy "spin$i" "$tmp/spin.json"; done

wd_port=$(free_port)
wd_spin_port=$(free_port)
cat >"$tmp/workerd/config.capnp" <<EOF
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "steady", worker = .steady), (name = "spin", worker = .spin) ],
  sockets = [
    (name = "http", address = "127.0.0.1:$wd_port", http = (), service = "steady"),
    (name = "spin", address = "127.0.0.1:$wd_spin_port", http = (), service = "spin"),
  ],
);
const steady :Workerd.Worker = (
  modules = [ (name = "steady.js", esModule = embed "steady.js") ],
  compatibilityDate = "2025-01-01",
);
const spin :Workerd.Worker = (
  modules = [ (name = "spin.js", esModule = embed "spin.js") ],
  compatibilityDate = "2025-01-01",
);
EOF

url_of() { [[ $1 == edgenode ]] && echo "http://127.0.0.1:$edge_port/" || echo "http://127.0.0.1:$wd_port/"; }
wait_http edgenode "$(url_of edgenode)" steady.localhost Hello
for i in $(seq 0 9); do
  code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: spin$i.localhost" "http://127.0.0.1:$edge_port/")
  [[ $code == 503 ]] || die "spin$i answered $code, not 503"
done

# Steady's latency for DURATION seconds; with "noisy", while the spinners run.
steady_run() {
  local name=$1 mode=$2 spin_pid=
  if [[ $mode == noisy ]]; then
    if [[ $name == edgenode ]]; then
      "$loadgen" -t1 -c"$SPIN_CONNECTIONS" -d"$(( DURATION + 2 ))" -n 10 -H 'spin%d.localhost' \
        "http://127.0.0.1:$edge_port/" >"$tmp/spin.json.out" &
    else
      "$loadgen" -t1 -c"$SPIN_CONNECTIONS" -d"$(( DURATION + 2 ))" "http://127.0.0.1:$wd_spin_port/" \
        >"$tmp/spin.json.out" &
    fi
    spin_pid=$!
    sleep 1
  fi
  "$loadgen" -t1 -c"$CONNECTIONS" -d"$DURATION" -H steady.localhost "$(url_of "$name")"
  if [[ -n $spin_pid ]]; then
    wait "$spin_pid" || true
    echo "spinners on $name: $(cat "$tmp/spin.json.out")" >&2
  fi
}

# workerd goes last: its spinning request never ends, and nothing after it
# could be served.
: >"$tmp/results"
for round in $(seq "$ROUNDS"); do
  for mode in alone noisy; do
    lg=$(steady_run edgenode "$mode")
    printf 'edgenode\t%s\t%s\t%s\n' "$mode" "$round" "$lg" >>"$tmp/results"
    printf 'round %s edgenode %-5s %s\n' "$round" "$mode" "$lg"
  done
done
say "starting workerd on 127.0.0.1:$wd_port (steady) and $wd_spin_port (spin)"
workerd_start "$tmp/workerd" config.capnp
wait_http workerd "$(url_of workerd)" steady.localhost Hello
for mode in alone noisy; do
  lg=$(steady_run workerd "$mode")
  printf 'workerd\t%s\t1\t%s\n' "$mode" "$lg" >>"$tmp/results"
  printf 'round 1 workerd  %-5s %s\n' "$mode" "$lg"
done

node - "$tmp/results" <<'EOF'
const fs = require('fs');
const rows = fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => {
  const [name, mode, round, lg] = l.split('\t');
  return { name, mode, round: +round, lg: JSON.parse(lg) };
});
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const ms = (us) => (Number.isFinite(us) ? (us / 1000).toFixed(2) + ' ms' : '-');
console.log('');
console.log('steady tenant, medians of rounds   req/s        p50        p99     errors');
for (const name of ['edgenode', 'workerd']) {
  const s = {};
  for (const mode of ['alone', 'noisy']) {
    const r = rows.filter((x) => x.name === name && x.mode === mode);
    s[mode] = { rps: median(r.map((x) => x.lg.rps)), p50: median(r.map((x) => x.lg.p50_us)),
                p99: median(r.map((x) => x.lg.p99_us)), errors: r.reduce((a, x) => a + x.lg.errors, 0),
                requests: r.reduce((a, x) => a + x.lg.requests, 0) };
    const v = s[mode];
    console.log(`${(name + ' ' + mode).padEnd(34)}${String(Math.round(v.rps)).padStart(6)}` +
                `${ms(v.requests ? v.p50 : NaN).padStart(11)}${ms(v.requests ? v.p99 : NaN).padStart(11)}` +
                `${String(v.errors).padStart(11)}`);
  }
  const ratio = s.noisy.requests ? (s.noisy.p99 / s.alone.p99).toFixed(2) + 'x' : 'no answer';
  console.log(`${(name + ' p99 noisy / alone').padEnd(34)}${ratio.padStart(28)}`);
}
EOF

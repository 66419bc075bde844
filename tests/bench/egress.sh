#!/usr/bin/env bash
# Egress benchmark: a worker that fetches a local upstream and returns its
# body, on edgenode (through its egress process) and on workerd (same
# module, same upstream), next to the upstream hit directly.
#
# Builds a Release tree, compiles tests/bench/egress_upstream.c (a tiny
# keep-alive server with a fixed 22-byte answer), starts the three servers
# and, ROUNDS times, for each of upstream / edgenode / workerd:
#   loadgen -t1 -c1 -dD     latency of one request at a time (the "added" p50)
#   wrk -t2 -cC -dD         throughput
#   loadgen -t2 -cC -dD     latency under that load
# then prints the medians, and the p50 each adds over the upstream alone.
#
# Environment: DURATION (seconds, default 10), CONNECTIONS (64), ROUNDS (3),
# WARMUP (seconds, 3), WORKERS (edgenode worker processes, 2),
# BUILD_DIR (default build-release), WORKERD (a workerd binary to use).
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-3}
WORKERS=${WORKERS:-2}
HOST_HEADER=bench.localhost

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init egress.sh egress

bench_need cmake cc wrk npm node curl setsid pkg-config

# --- build -----------------------------------------------------------------
bench_build edgenode edgenode-worker edgenode-egress loadgen
loadgen=$build/bin/loadgen
# shellcheck disable=SC2046
cc -O2 -o "$tmp/upstream" "$repo/tests/bench/egress_upstream.c" $(pkg-config --cflags --libs libuv) ||
  die "compiling the upstream failed"
bench_workerd

# --- machine ---------------------------------------------------------------
echo "machine: $(machine_desc)"
echo "workerd: $("$workerd" --version 2>&1 | head -1)"
report_busy
echo "load: $DURATION s per run, $CONNECTIONS connections, $ROUNDS rounds, $WORKERS edgenode worker processes"

# --- servers ---------------------------------------------------------------
up_port=$(free_port)
wd_port=$(free_port)

bench_spawn "$tmp" "$tmp/upstream.log" "$tmp/upstream" "$up_port"

upstream_url="http://127.0.0.1:$up_port/data"
cat >"$tmp/worker.js" <<EOF
export default {
  async fetch(request) {
    const upstream = await fetch('$upstream_url');
    return new Response(await upstream.text(), { headers: { 'content-type': 'text/plain' } });
  },
};
EOF

say "starting edgenode ($WORKERS worker processes)"
edgenode_start "$(free_port)" "$(free_port)" --workers "$WORKERS" --egress-allow-cidr 127.0.0.1/32

mkdir -p "$tmp/workerd"
cp "$tmp/worker.js" "$tmp/workerd/worker.js"
cat >"$tmp/workerd/config.capnp" <<EOF
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .bench),
    (name = "net", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:$wd_port", http = (), service = "main") ],
);
const bench :Workerd.Worker = (
  modules = [ (name = "worker.js", esModule = embed "worker.js") ],
  compatibilityDate = "2025-01-01",
  globalOutbound = "net",
);
EOF
say "starting workerd on 127.0.0.1:$wd_port"
workerd_start "$tmp/workerd" config.capnp

node - "$edge_control" "$token" "$tmp/worker.js" "$up_port" <<'EOF' || die "deploying the worker failed"
const [port, token, file, up] = process.argv.slice(2);
const body = JSON.stringify({
  modules: { 'index.js': require('fs').readFileSync(file, 'utf8') },
  egress: [{ match: `http://127.0.0.1:${up}/data`, methods: ['GET'] }],
});
fetch(`http://127.0.0.1:${port}/v1/workers/bench`, {
  method: 'PUT', body, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
}).then(async (r) => { if (r.status >= 300) { console.error(r.status, await r.text()); process.exit(1); } });
EOF

url_of() {
  case $1 in
    upstream) echo "$upstream_url" ;;
    edgenode) echo "http://127.0.0.1:$edge_port/" ;;
    workerd) echo "http://127.0.0.1:$wd_port/" ;;
  esac
}

check() {
  local name=$1 body
  for _ in $(seq 100); do
    body=$(curl -sf -m 2 -H "Host: $HOST_HEADER" "$(url_of "$name")" 2>/dev/null || true)
    [[ $body == "hello from upstream!"* ]] && return 0
    sleep 0.1
  done
  tail -20 "$tmp/$name.log" >&2 || true
  die "$name does not answer with the upstream's body (got: ${body:-nothing})"
}
for name in upstream edgenode workerd; do check "$name"; done

run_wrk() {
  local name=$1 seconds=$2 out
  out=$(wrk -t2 -c"$CONNECTIONS" -d"${seconds}s" -H "Host: $HOST_HEADER" "$(url_of "$name")")
  if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
    printf 'warning: wrk against %s: %s\n' "$name" "$(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' ')" >&2
  fi
  sed -n 's/^Requests\/sec:[[:space:]]*//p' <<<"$out"
}

say "warming up for $WARMUP s each"
for name in upstream edgenode workerd; do run_wrk "$name" "$WARMUP" >/dev/null; done

: >"$tmp/results"
for round in $(seq "$ROUNDS"); do
  for name in upstream edgenode workerd; do
    one=$("$loadgen" -t1 -c1 -d"$DURATION" -H "$HOST_HEADER" "$(url_of "$name")")
    rps=$(run_wrk "$name" "$DURATION")
    lg=$("$loadgen" -t2 -c"$CONNECTIONS" -d"$DURATION" -H "$HOST_HEADER" "$(url_of "$name")")
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$round" "$rps" "$one" "$lg" >>"$tmp/results"
    printf 'round %s %-8s wrk %10s req/s   c1 %s   c%s %s\n' "$round" "$name" "$rps" "$one" "$CONNECTIONS" "$lg"
  done
done

node - "$tmp/results" "$CONNECTIONS" <<'EOF'
const fs = require('fs');
const conns = process.argv[3];
const rows = fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => {
  const [name, round, rps, one, lg] = l.split('\t');
  return { name, round: +round, rps: +rps, one: JSON.parse(one), lg: JSON.parse(lg) };
});
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const stats = {};
for (const name of ['upstream', 'edgenode', 'workerd']) {
  const r = rows.filter((x) => x.name === name);
  stats[name] = {
    rps: median(r.map((x) => x.rps)),
    p50_1: median(r.map((x) => x.one.p50_us)),
    p99_1: median(r.map((x) => x.one.p99_us)),
    p50: median(r.map((x) => x.lg.p50_us)),
    p99: median(r.map((x) => x.lg.p99_us)),
    errors: r.reduce((a, x) => a + x.one.errors + x.lg.errors, 0),
  };
}
const f0 = (v) => v.toLocaleString('en-US', { maximumFractionDigits: 0 });
const us = (v) => `${f0(v)} µs`;
const pad = (s, n) => String(s).padStart(n);
const u = stats.upstream;
console.log('');
const cols = ['requests/s (wrk)', 'p50 c1', 'added p50 c1', 'p99 c1', `p50 c${conns}`, `p99 c${conns}`, 'errors'];
const widths = [18, 10, 14, 11, 11, 11, 8];
const line = (label, cells) => console.log(label.padEnd(22) + cells.map((c, i) => pad(c, widths[i])).join(''));
line(`medians of ${rows.length / 3} rounds`, cols);
for (const name of ['upstream', 'edgenode', 'workerd']) {
  const s = stats[name];
  const added = name === 'upstream' ? '' : us(s.p50_1 - u.p50_1);
  line(name, [f0(s.rps), us(s.p50_1), added, us(s.p99_1), us(s.p50), us(s.p99), s.errors]);
}
const e = stats.edgenode, w = stats.workerd;
line('edgenode / workerd', [(e.rps / w.rps).toFixed(2) + 'x', (e.p50_1 / w.p50_1).toFixed(2) + 'x',
  ((e.p50_1 - u.p50_1) / (w.p50_1 - u.p50_1)).toFixed(2) + 'x', '', '', '', '']);
EOF

#!/usr/bin/env bash
# Hello-world benchmark: edgenode against workerd, same module, same machine,
# same run.
#
# Builds a Release tree in build-release/, starts edgenode (dev mode serves
# examples/hello.js as worker `hello`) and workerd (npm package `workerd`)
# serving the same file, then alternates between them ROUNDS times:
#   wrk -t2 -cC -dDs            throughput, as wrk reports it
#   loadgen -t2 -cC -dD         per-request latency, every response timed
# and prints the medians of each figure and the ratio edgenode/workerd, with
# each server's CPU time per request (user + system of its whole process
# group over the wrk run), which other work on the machine disturbs less.
#
# Environment: DURATION (seconds, default 10), CONNECTIONS (64), ROUNDS (3),
# WARMUP (seconds per server before the first round, 3),
# PERF=FILE to record `perf record -g` of the edgenode-worker processes during
# one more edgenode wrk run after the measured ones (read it with
# `perf report -i FILE --no-children`).
set -euo pipefail

DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-3}
WARMUP=${WARMUP:-3}
PERF=${PERF:-}
HOST_HEADER=hello.localhost

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init hello.sh hello
bench_on_cleanup() { [[ -n ${perf_pid:-} ]] && kill "$perf_pid" 2>/dev/null; }

bench_need cmake wrk npm node curl setsid

# --- build -----------------------------------------------------------------
targets=(edgenode edgenode-worker loadgen)
# The node starts its egress process when the binary is next to it; it idles
# here (hello makes no outbound calls) but keeps the node as deployed.
[[ -f $repo/egress/CMakeLists.txt ]] && targets+=(edgenode-egress)
bench_build "${targets[@]}"
loadgen=$build/bin/loadgen
bench_workerd

# --- machine ---------------------------------------------------------------
echo "machine: $(machine_desc)"
echo "workerd: $("$workerd" --version 2>&1 | head -1); $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
report_busy
echo "load: $DURATION s per run, $CONNECTIONS connections, $ROUNDS rounds, Host: $HOST_HEADER"

# --- servers ---------------------------------------------------------------
say "starting edgenode"
edgenode_start "$(free_port)" "$(free_port)" --workers 2 --dev
wd_port=$(free_port)

mkdir -p "$tmp/workerd"
cp "$repo/examples/hello.js" "$tmp/workerd/hello.js"
workerd_config "$tmp/workerd" "$wd_port" hello.js
say "starting workerd on 127.0.0.1:$wd_port"
workerd_start "$tmp/workerd" config.capnp
wait_http edgenode "http://127.0.0.1:$edge_port/" "$HOST_HEADER" Hello
wait_http workerd "http://127.0.0.1:$wd_port/" "$HOST_HEADER" Hello

# --- load ------------------------------------------------------------------
url_of() { [[ $1 == edgenode ]] && echo "http://127.0.0.1:$edge_port/" || echo "http://127.0.0.1:$wd_port/"; }
pgid_of() { [[ $1 == edgenode ]] && echo "$edge_pid" || echo "$wd_pid"; }
clk_tck=$(getconf CLK_TCK)

# Prints "requests/s requests cpu_ticks" of one wrk run; warns on errors it reports.
run_wrk() {
  local name=$1 seconds=$2 out before after
  before=$(group_ticks "$(pgid_of "$name")")
  out=$(wrk -t2 -c"$CONNECTIONS" -d"${seconds}s" -H "Host: $HOST_HEADER" "$(url_of "$name")")
  after=$(group_ticks "$(pgid_of "$name")")
  if grep -qE 'Non-2xx|Socket errors' <<<"$out"; then
    printf 'warning: wrk against %s: %s\n' "$name" "$(grep -E 'Non-2xx|Socket errors' <<<"$out" | tr -s ' ')" >&2
  fi
  echo "$(sed -n 's/^Requests\/sec:[[:space:]]*//p' <<<"$out")" \
    "$(sed -n 's/^[[:space:]]*\([0-9]*\) requests in.*/\1/p' <<<"$out")" \
    "$(( after - before ))"
}

say "warming up both servers for $WARMUP s each"
run_wrk edgenode "$WARMUP" >/dev/null
run_wrk workerd "$WARMUP" >/dev/null

: >"$tmp/results"
for round in $(seq "$ROUNDS"); do
  for name in edgenode workerd; do
    read -r rps requests ticks < <(run_wrk "$name" "$DURATION")
    cpu_us=$(awk -v t="$ticks" -v hz="$clk_tck" -v n="$requests" 'BEGIN { printf "%.1f", (n > 0 ? t * 1e6 / hz / n : 0) }')
    lg=$("$loadgen" -t2 -c"$CONNECTIONS" -d"$DURATION" -H "$HOST_HEADER" "$(url_of "$name")")
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$round" "$rps" "$cpu_us" "$lg" >>"$tmp/results"
    printf 'round %s %-8s wrk %9s req/s %4s us CPU/req   loadgen %s\n' \
      "$round" "$name" "$rps" "$cpu_us" "$lg"
  done
done

# Profiling slows the profiled processes down, so it gets a run of its own
# that is not part of the figures.
if [[ -n $PERF ]]; then
  workers=$(pgrep -d, -x -P "$edge_pid" edgenode-worker || true)
  [[ -n $workers ]] || die "no edgenode-worker process found for perf"
  say "profiling edgenode-worker processes $workers into $PERF"
  perf record -g -o "$PERF" -p "$workers" -- sleep "$DURATION" >"$tmp/perf.log" 2>&1 &
  perf_pid=$!
  run_wrk edgenode "$DURATION" >/dev/null
  wait "$perf_pid" || { cat "$tmp/perf.log" >&2; die "perf record failed"; }
  perf_pid=
fi

# --- summary ---------------------------------------------------------------
node - "$tmp/results" <<'EOF'
const fs = require("fs");
const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => {
  const [name, round, rps, cpu, lg] = l.split("\t");
  return { name, round: +round, rps: +rps, cpu: +cpu, lg: JSON.parse(lg) };
});
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const stats = {};
for (const name of ["edgenode", "workerd"]) {
  const r = rows.filter((x) => x.name === name);
  stats[name] = {
    rps: median(r.map((x) => x.rps)),
    cpu: median(r.map((x) => x.cpu)),
    p50: median(r.map((x) => x.lg.p50_us)),
    p99: median(r.map((x) => x.lg.p99_us)),
    lg_rps: median(r.map((x) => x.lg.rps)),
    errors: r.reduce((a, x) => a + x.lg.errors, 0),
  };
}
const e = stats.edgenode, w = stats.workerd;
const int = (v) => v.toLocaleString("en-US", { maximumFractionDigits: 0 });
const cols = [
  ["requests/s (wrk)", "rps", (s) => int(s.rps)],
  ["p50 (loadgen)", "p50", (s) => (s.p50 / 1000).toFixed(2) + " ms"],
  ["p99 (loadgen)", "p99", (s) => (s.p99 / 1000).toFixed(2) + " ms"],
  ["CPU/request", "cpu", (s) => s.cpu.toFixed(1) + " us"],
  ["req/s (loadgen)", "lg_rps", (s) => int(s.lg_rps)],
];
const line = (label, cells) => console.log(label.padEnd(22) + cells.map((c) => c.padStart(17)).join(""));
console.log("");
line(`medians of ${rows.length / 2} rounds`, [...cols.map((c) => c[0]), "errors (loadgen)"]);
line("edgenode", [...cols.map((c) => c[2](e)), String(e.errors)]);
line("workerd", [...cols.map((c) => c[2](w)), String(w.errors)]);
line("edgenode / workerd", cols.map((c) => (e[c[1]] / w[c[1]]).toFixed(2) + "x"));
EOF

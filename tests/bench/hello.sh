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

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$repo/build-release
cache=$build/bench-cache
tmp=$(mktemp -d "${TMPDIR:-/tmp}/edgenode-bench.XXXXXX")
pgids=()

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'hello.sh: %s\n' "$*" >&2; exit 1; }

# Every server runs in its own process group (setsid), so one kill reaches
# edgenode's worker processes too, even if the supervisor is wedged.
cleanup() {
  local g
  [[ -n ${perf_pid:-} ]] && kill "$perf_pid" 2>/dev/null
  for g in "${pgids[@]}"; do
    kill -TERM -- "-$g" 2>/dev/null || true
  done
  for g in "${pgids[@]}"; do
    for _ in $(seq 50); do
      kill -0 -- "-$g" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$g" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

for tool in cmake wrk npm node curl setsid; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

free_port() {
  node -e 'const s = require("net").createServer();
           s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Share of the CPUs busy over one second: other work on the machine skews
# both servers, so it is measured (and reported) before they start.
cpu_busy() {
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local total=0 idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) i
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}

# --- build -----------------------------------------------------------------
say "building Release in build-release/"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" 2>&1 ||
  { cat "$tmp/cmake.log" >&2; die "cmake configure failed"; }
targets=(edgenode edgenode-worker loadgen)
# The node starts its egress process when the binary is next to it; it idles
# here (hello makes no outbound calls) but keeps the node as deployed.
[[ -f $repo/egress/CMakeLists.txt ]] && targets+=(edgenode-egress)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" \
  >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log" >&2; die "build failed"; }
loadgen=$build/bin/loadgen

# --- workerd ---------------------------------------------------------------
workerd=$cache/workerd
if [[ ! -x $workerd ]]; then
  say "installing the npm package workerd"
  npm install --prefix "$tmp/npm" --no-audit --no-fund workerd >"$tmp/npm.log" 2>&1 ||
    { cat "$tmp/npm.log" >&2; die "npm install workerd failed"; }
  mkdir -p "$cache"
  cp "$tmp/npm/node_modules/@cloudflare/workerd-linux-64/bin/workerd" "$workerd.part"
  mv "$workerd.part" "$workerd"
fi

# --- machine ---------------------------------------------------------------
cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
echo "machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r)"
echo "workerd: $("$workerd" --version 2>&1 | head -1); $(wrk -v 2>&1 | head -1 | cut -d' ' -f1-2)"
busy=$(cpu_busy)
echo "CPU busy before the run: $busy%"
if (( busy > 10 )); then
  echo "warning: other work is using the CPUs ($busy%); figures will be noisy" >&2
fi
echo "load: $DURATION s per run, $CONNECTIONS connections, $ROUNDS rounds, Host: $HOST_HEADER"

# --- servers ---------------------------------------------------------------
edge_port=$(free_port)
edge_control=$(free_port)
wd_port=$(free_port)

say "starting edgenode on 127.0.0.1:$edge_port"
(cd "$repo" && exec setsid "$build/bin/edgenode" --listen "127.0.0.1:$edge_port" \
  --control "127.0.0.1:$edge_control" --data "$tmp/data" --workers 2 --dev \
  >"$tmp/edgenode.log" 2>&1) &
edge_pid=$!
pgids+=("$edge_pid")

mkdir -p "$tmp/workerd"
cp "$repo/examples/hello.js" "$tmp/workerd/hello.js"
cat >"$tmp/workerd/config.capnp" <<EOF
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .hello) ],
  sockets = [ (name = "http", address = "127.0.0.1:$wd_port", http = (), service = "main") ],
);
const hello :Workerd.Worker = (
  modules = [ (name = "hello.js", esModule = embed "hello.js") ],
  compatibilityDate = "2025-01-01",
);
EOF
say "starting workerd on 127.0.0.1:$wd_port"
(cd "$tmp/workerd" && exec setsid "$workerd" serve config.capnp >"$tmp/workerd.log" 2>&1) &
wd_pid=$!
pgids+=("$wd_pid")

# Waits until $1 (pid) has logged readiness (pattern $3 in file $2, if given)
# and its port $4 answers the hello worker.
wait_ready() {
  local pid=$1 log=$2 pattern=$3 port=$4 name=$5
  for _ in $(seq 300); do
    kill -0 "$pid" 2>/dev/null || { tail -20 "$log" >&2; die "$name exited during start-up"; }
    if [[ -z $pattern ]] || grep -q "$pattern" "$log"; then
      if curl -sf -m 2 -H "Host: $HOST_HEADER" "http://127.0.0.1:$port/" >"$tmp/body" 2>/dev/null &&
        grep -q 'Hello' "$tmp/body"; then
        return 0
      fi
    fi
    sleep 0.1
  done
  tail -20 "$log" >&2
  die "$name did not become ready in 30 s"
}
wait_ready "$edge_pid" "$tmp/edgenode.log" '"msg":"ready"' "$edge_port" edgenode
wait_ready "$wd_pid" "$tmp/workerd.log" '' "$wd_port" workerd

# --- load ------------------------------------------------------------------
url_of() { [[ $1 == edgenode ]] && echo "http://127.0.0.1:$edge_port/" || echo "http://127.0.0.1:$wd_port/"; }
pgid_of() { [[ $1 == edgenode ]] && echo "$edge_pid" || echo "$wd_pid"; }
clk_tck=$(getconf CLK_TCK)

# CPU time (user + system, clock ticks) used so far by every process of a
# server's process group. Over a run it gives the server's CPU cost per
# request, which other work on the machine disturbs far less than the rate.
group_ticks() {
  local pid total=0 stat rest f
  for pid in $(pgrep -g "$1"); do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    rest=${stat##*) }         # the command name may contain spaces
    read -r -a f <<<"$rest"   # f[11], f[12] = utime, stime (fields 14, 15)
    total=$(( total + f[11] + f[12] ))
  done
  echo "$total"
}

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
    cpu_us=$(( requests > 0 ? ticks * 1000000 / clk_tck / requests : 0 ))
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
  ["CPU/request", "cpu", (s) => Math.round(s.cpu) + " us"],
  ["req/s (loadgen)", "lg_rps", (s) => int(s.lg_rps)],
];
const line = (label, cells) => console.log(label.padEnd(22) + cells.map((c) => c.padStart(17)).join(""));
console.log("");
line(`medians of ${rows.length / 2} rounds`, [...cols.map((c) => c[0]), "errors (loadgen)"]);
line("edgenode", [...cols.map((c) => c[2](e)), String(e.errors)]);
line("workerd", [...cols.map((c) => c[2](w)), String(w.errors)]);
line("edgenode / workerd", cols.map((c) => (e[c[1]] / w[c[1]]).toFixed(2) + "x"));
EOF

#!/usr/bin/env bash
# Web API workloads: the per-request cost of the same worker module
# (tests/bench/apis.js) on edgenode and on workerd, same machine, same run.
#
#   /json    parse a 16 KiB JSON document, change it, serialize it back
#   /stream  a 1 MiB response body produced as a ReadableStream
#   /sha256  SHA-256 of 1 MiB with crypto.subtle.digest
#   /urls    parse 10,000 URLs with the URL constructor
#
# Each server runs on one core's worth of processes (edgenode: one worker
# process; workerd: its one thread). For every route and server, ROUNDS times:
# loadgen with one connection for DURATION seconds, every response timed.
# Reported: the median p50 latency and the CPU time per request (user +
# system of the server's whole process group divided by the requests served),
# which other work on the machine disturbs less than latency; then the ratios
# edgenode / workerd (below 1: edgenode is cheaper).
#
# Environment: DURATION (seconds, 5), ROUNDS (3), and as for every script
# here BUILD_DIR / BUILD, SKIP_BUILD=1, WORKERD.
set -euo pipefail

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
HOST_HEADER=apis.localhost
ROUTES=(json stream sha256 urls)

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init apis.sh apis
bench_need cmake npm node curl setsid
bench_build edgenode edgenode-worker loadgen
bench_workerd
loadgen=$build/bin/loadgen

echo "machine: $(machine_desc)"
echo "workerd: $("$workerd" --version 2>&1 | head -1)"
echo "load: one connection, $DURATION s per run, $ROUNDS rounds per route and server"
report_busy

# --- servers ---------------------------------------------------------------
say "starting edgenode (1 worker process)"
edgenode_start "$(free_port)" "$(free_port)" --workers 1 --log-level warn
node -e '
  const fs = require("fs");
  process.stdout.write(JSON.stringify({ main_module: "apis.js",
    modules: { "apis.js": fs.readFileSync(process.argv[1], "utf8") },
    limits: { cpu_ms: 30000 } }));' "$repo/tests/bench/apis.js" >"$tmp/apis.json"
edgenode_deploy apis "$tmp/apis.json"

mkdir -p "$tmp/workerd"
cp "$repo/tests/bench/apis.js" "$tmp/workerd/apis.js"
wd_port=$(free_port)
workerd_config "$tmp/workerd" "$wd_port" apis.js
say "starting workerd on 127.0.0.1:$wd_port"
workerd_start "$tmp/workerd" config.capnp

wait_http edgenode "http://127.0.0.1:$edge_port/sha256" "$HOST_HEADER" '[0-9a-f]'
wait_http workerd "http://127.0.0.1:$wd_port/sha256" "$HOST_HEADER" '[0-9a-f]'

# Both must answer the same bytes before their speed means anything.
for route in "${ROUTES[@]}"; do
  a=$(curl -sf -H "Host: $HOST_HEADER" "http://127.0.0.1:$edge_port/$route" | sha256sum)
  b=$(curl -sf -H "Host: $HOST_HEADER" "http://127.0.0.1:$wd_port/$route" | sha256sum)
  [[ $a == "$b" ]] || die "/$route: edgenode and workerd answer differently"
done

port_of() { [[ $1 == edgenode ]] && echo "$edge_port" || echo "$wd_port"; }
group_of() { [[ $1 == edgenode ]] && echo "$edge_pid" || echo "$wd_pid"; }
hz=$(getconf CLK_TCK)

# --- runs ------------------------------------------------------------------
results=$tmp/results.jsonl
: >"$results"
for route in "${ROUTES[@]}"; do
  for name in edgenode workerd; do
    url="http://127.0.0.1:$(port_of "$name")/$route"
    "$loadgen" -t1 -c1 -d1 -H "$HOST_HEADER" "$url" >/dev/null  # warm-up: JIT, caches
  done
  for round in $(seq "$ROUNDS"); do
    for name in edgenode workerd; do
      say "/$route $name round $round"
      url="http://127.0.0.1:$(port_of "$name")/$route"
      t0=$(group_ticks "$(group_of "$name")")
      out=$("$loadgen" -t1 -c1 -d"$DURATION" -H "$HOST_HEADER" "$url")
      t1=$(group_ticks "$(group_of "$name")")
      node -e '
        const [route, name, out, ticks, hz] = process.argv.slice(1);
        const j = JSON.parse(out);
        if (j.errors) throw new Error(`/${route} ${name}: ${j.errors} errors`);
        const cpu_us = (Number(ticks) / Number(hz)) * 1e6 / j.requests;
        console.log(JSON.stringify({ route, name, rps: j.rps, p50_us: j.p50_us, p99_us: j.p99_us, cpu_us }));
      ' "$route" "$name" "$out" "$((t1 - t0))" "$hz" >>"$results"
    done
  done
done

# --- report ----------------------------------------------------------------
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n").map(JSON.parse);
  const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };
  const f0 = (x) => Math.round(x).toLocaleString("en-US");
  const pick = (route, name, key) => median(rows.filter((r) => r.route === route && r.name === name).map((r) => r[key]));
  console.log("medians        p50 edgenode  p50 workerd   ratio   CPU/req edgenode  CPU/req workerd   ratio");
  for (const route of [...new Set(rows.map((r) => r.route))]) {
    const ep = pick(route, "edgenode", "p50_us"), wp = pick(route, "workerd", "p50_us");
    const ec = pick(route, "edgenode", "cpu_us"), wc = pick(route, "workerd", "cpu_us");
    console.log(`/${route.padEnd(12)} ${(f0(ep) + " us").padStart(12)} ${(f0(wp) + " us").padStart(12)} ` +
      `${(ep / wp).toFixed(2).padStart(6)}x ${(f0(ec) + " us").padStart(17)} ${(f0(wc) + " us").padStart(16)} ` +
      `${(ec / wc).toFixed(2).padStart(6)}x`);
  }
' "$results"

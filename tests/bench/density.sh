#!/usr/bin/env bash
# Density: N deployed workers (10,000 by default) on one node, requested
# round-robin, so that each request is for another tenant than the last.
#
# Deploys N tiny workers (each answers its own name) through the control
# API, then runs loadgen for DURATION seconds twice, round-robin over every
# tenant (`loadgen -n N -H 'd%d.localhost'`): the first pass finds no
# isolate loaded, the second finds whatever the first left resident. For
# each pass: requests/s, p50/p99, errors, the peak RSS of the node, and per
# worker process the isolates resident, evictions so far and memory
# mappings (against vm.max_map_count).
#
# A worker process holds at most 4,000 isolates (WORKER_MAX_ISOLATES), and
# any process may be asked for any tenant (they share the listening socket):
# with N above what the processes hold, a round-robin over N keeps evicting
# the least recently used and every request is a cold start. The run shows
# what that costs.
#
# workerd has no counterpart here: its only way to run thousands of workers
# from one process is its loader, which never evicts (see idle-memory.sh for
# its memory per worker).
#
# Environment: N (10000), DURATION (seconds per pass, 20), CONNECTIONS (16),
# WORKERS (edgenode worker processes, 2), ISOLATE_MB (--isolate-memory-mb,
# 65536: the isolate cap, not the heap budget, is what binds), and BUILD_DIR /
# BUILD, SKIP_BUILD=1.
set -euo pipefail

N=${N:-10000}
DURATION=${DURATION:-20}
CONNECTIONS=${CONNECTIONS:-16}
WORKERS=${WORKERS:-2}
ISOLATE_MB=${ISOLATE_MB:-65536}

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init density.sh density
bench_need cmake node curl setsid ps
bench_build edgenode edgenode-worker loadgen
loadgen=$build/bin/loadgen

echo "machine: $(machine_desc); vm.max_map_count $(cat /proc/sys/vm/max_map_count)"
echo "tenants: N=$N; loadgen $CONNECTIONS connections, $DURATION s per pass; $WORKERS worker processes"
report_busy

say "starting edgenode ($WORKERS worker processes)"
edgenode_start "$(free_port)" "$(free_port)" --workers "$WORKERS" --log-level warn \
  --isolate-memory-mb "$ISOLATE_MB" --idle-timeout-s 3600
base_rss=$(rss_of "$edge_pid")

say "deploying $N workers"
node "$repo/tests/bench/tenants.mjs" deploy "$edge_control" "$token" d "$N" >"$tmp/deploy.json" ||
  die "deploying failed"
echo "deployed: $(cat "$tmp/deploy.json"); node RSS $(( base_rss / 1024 )) -> $(( $(rss_of "$edge_pid") / 1024 )) MiB"

# Per worker process: "pid isolates evictions restarts mappings".
processes() {
  curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$edge_control/v1/node" |
    node -e 'let s = ""; process.stdin.on("data", (d) => s += d).on("end", () => {
      for (const w of JSON.parse(s).workers) console.log(w.pid, w.isolates, w.evictions, w.restarts); });' |
    while read -r pid isolates evictions restarts; do
      echo "$pid $isolates $evictions $restarts $(wc -l <"/proc/$pid/maps" 2>/dev/null || echo ?)"
    done
}

for pass in 1 2; do
  "$loadgen" -t2 -c"$CONNECTIONS" -d"$DURATION" -n "$N" -H 'd%d.localhost' \
    "http://127.0.0.1:$edge_port/" >"$tmp/pass$pass.json" &
  lg=$!
  peak=0
  while kill -0 "$lg" 2>/dev/null; do
    now=$(rss_of "$edge_pid")
    (( now > peak )) && peak=$now
    sleep 1
  done
  wait "$lg" || die "loadgen failed"
  echo "pass $pass: $(cat "$tmp/pass$pass.json")"
  echo "pass $pass: node RSS peak $(( peak / 1024 )) MiB, now $(( $(rss_of "$edge_pid") / 1024 )) MiB"
  processes | while read -r pid isolates evictions restarts maps; do
    echo "pass $pass: worker process $pid: $isolates isolates resident, $evictions evictions," \
      "$maps mappings, restarted $restarts times"
  done
done

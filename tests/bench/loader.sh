#!/usr/bin/env bash
# Loader benchmarks (Dynamic Workers): edgenode against workerd's worker
# loader, the same parent script on both, same machine, same run.
#
#   1. cold: the parent load()s a fresh child with unique code for every
#      request and returns the child's response;
#   2. warm: the parent get()s the child by a fixed id (cached isolate).
#
# For each, per round, loadgen with 1 connection (latency) and with
# CONNECTIONS connections (throughput), every response timed. Then the
# in-process time from the load() call to the first byte of the child's
# response (fetch() settling), measured inside the parent over INPROC loads
# (in batches of 10: Date.now() has millisecond resolution on both
# runtimes), back to back and with INPROC_GAP ms idle before each load, and
# the resident memory (RSS) of each server during a cold-load run of
# RSS_SECONDS (workerd never evicts: it only gets RSS_SECONDS_WORKERD, or it
# would take the machine).
#
# Environment: DURATION (seconds per run, default 5), CONNECTIONS (64),
# ROUNDS (3), INPROC (loads, 500), INPROC_GAP (ms, 25), RSS_SECONDS (60), RSS_SECONDS_WORKERD (10),
# BUILD (build directory, default build-release).
set -euo pipefail

DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-64}
ROUNDS=${ROUNDS:-3}
INPROC=${INPROC:-500}
INPROC_GAP=${INPROC_GAP:-25}
RSS_SECONDS=${RSS_SECONDS:-60}
RSS_SECONDS_WORKERD=${RSS_SECONDS_WORKERD:-10}
HOST_HEADER=parent.localhost

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init loader.sh loader

bench_need cmake npm node curl setsid ps

# --- build -----------------------------------------------------------------
bench_build edgenode edgenode-worker loadgen
loadgen=$build/bin/loadgen
bench_workerd

# --- the parent script: one file, both servers -------------------------------
mkdir -p "$tmp/workerd"
cp "$repo/tests/bench/workers/loader_parent.js" "$tmp/workerd/parent.js"

# --- machine ---------------------------------------------------------------
echo "machine: $(machine_desc)"
echo "workerd: $("$workerd" --version 2>&1 | head -1)"
echo "load: loadgen, $DURATION s per run, 1 and $CONNECTIONS connections, $ROUNDS rounds"
report_busy

# --- servers ---------------------------------------------------------------
say "starting edgenode (2 worker processes)"
edgenode_start "$(free_port)" "$(free_port)" --workers 2 --log-level warn
wd_port=$(free_port)
deploy_json "$tmp/deploy.json" '{"LOADER": {"type": "loader"}}' '{"cpu_ms": 1000, "wall_ms": 300000}' \
  "parent.js=$tmp/workerd/parent.js"
edgenode_deploy parent "$tmp/deploy.json"

workerd_config "$tmp/workerd" "$wd_port" parent.js '(name = "LOADER", workerLoader = ())'
say "starting workerd on 127.0.0.1:$wd_port"
workerd_start "$tmp/workerd" config.capnp --experimental

url_of() {
  [[ $1 == edgenode ]] && echo "http://127.0.0.1:$edge_port$2" || echo "http://127.0.0.1:$wd_port$2"
}
for name in edgenode workerd; do
  wait_http "$name" "$(url_of "$name" /warm)" "$HOST_HEADER" warm
done

# --- latency and throughput ---------------------------------------------------
say "warming up"
for name in edgenode workerd; do
  "$loadgen" -t2 -c8 -d2 -H "$HOST_HEADER" "$(url_of "$name" /warm)" >/dev/null
  "$loadgen" -t1 -c1 -d2 -H "$HOST_HEADER" "$(url_of "$name" /cold)" >/dev/null
done

: >"$tmp/results"
for round in $(seq "$ROUNDS"); do
  for scenario in cold warm; do
    for conns in 1 "$CONNECTIONS"; do
      threads=$(( conns > 1 ? 2 : 1 ))
      for name in edgenode workerd; do
        lg=$("$loadgen" -t"$threads" -c"$conns" -d"$DURATION" -H "$HOST_HEADER" "$(url_of "$name" "/$scenario")")
        printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$scenario" "$conns" "$round" "$lg" >>"$tmp/results"
        printf 'round %s %-5s c=%-3s %-8s %s\n' "$round" "$scenario" "$conns" "$name" "$lg"
      done
    done
  done
done

# --- in-process: load() to the child's first response byte, inside the parent -
# Back to back, then with INPROC_GAP idle milliseconds before each load (a
# server that is not saturated: edgenode's pool of blank isolates refills then).
: >"$tmp/inproc"
for gap in 0 "$INPROC_GAP"; do
  for name in edgenode workerd; do
    out=$(curl -sf -m 600 -H "Host: $HOST_HEADER" "$(url_of "$name" "/inproc?n=$INPROC&gap=$gap")") ||
      die "$name: /inproc failed"
    printf '%s\t%s\t%s\n' "$name" "$gap" "$out" >>"$tmp/inproc"
    printf 'in-process %-8s gap %s ms: %s\n' "$name" "$gap" "$out"
  done
done

# --- memory during a long cold-load run -----------------------------------------
: >"$tmp/rss"
for name in edgenode workerd; do
  seconds=$([[ $name == edgenode ]] && echo "$RSS_SECONDS" || echo "$RSS_SECONDS_WORKERD")
  group=$([[ $name == edgenode ]] && echo "$edge_pid" || echo "$wd_pid")
  before=$(rss_of "$group")
  "$loadgen" -t2 -c"$CONNECTIONS" -d"$seconds" -H "$HOST_HEADER" "$(url_of "$name" /cold)" \
    >"$tmp/rss-$name.json" &
  lg_pid=$!
  peak=0
  while kill -0 "$lg_pid" 2>/dev/null; do
    now=$(rss_of "$group")
    (( now > peak )) && peak=$now
    sleep 1
  done
  wait "$lg_pid"
  end=$(rss_of "$group")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$seconds" "$before" "$peak" "$end" \
    "$(cat "$tmp/rss-$name.json")" >>"$tmp/rss"
  printf 'rss %-8s %s s cold: before %s MiB, peak %s MiB, after %s MiB; %s\n' "$name" "$seconds" \
    $(( before / 1024 )) $(( peak / 1024 )) $(( end / 1024 )) "$(cat "$tmp/rss-$name.json")"
done
budget=$(curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$edge_control/v1/node" |
  node -e 'let s = ""; process.stdin.on("data", (d) => s += d).on("end", () => {
    const j = JSON.parse(s); console.log(j.worker_memory_budget_mb ?? "?"); });')
echo "edgenode worker RSS budget: $budget MiB per process"

# --- summary -------------------------------------------------------------------
node - "$tmp/results" "$tmp/inproc" "$tmp/rss" <<'EOF'
const fs = require("fs");
const lines = (f) => fs.readFileSync(f, "utf8").trim().split("\n").filter(Boolean);
const rows = lines(process.argv[2]).map((l) => {
  const [name, scenario, conns, round, lg] = l.split("\t");
  return { name, scenario, conns: +conns, round: +round, lg: JSON.parse(lg) };
});
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const ms = (us) => (us / 1000).toFixed(2) + " ms";
const f0 = (v) => v.toLocaleString("en-US", { maximumFractionDigits: 0 });
const pad = (s, n) => String(s).padStart(n);
console.log("");
console.log("medians of rounds              req/s        p50        p99     errors");
for (const scenario of ["cold", "warm"]) {
  for (const conns of [...new Set(rows.map((r) => r.conns))]) {
    const s = {};
    for (const name of ["edgenode", "workerd"]) {
      const r = rows.filter((x) => x.name === name && x.scenario === scenario && x.conns === conns);
      if (!r.length) continue;
      s[name] = { rps: median(r.map((x) => x.lg.rps)), p50: median(r.map((x) => x.lg.p50_us)),
                  p99: median(r.map((x) => x.lg.p99_us)), errors: r.reduce((a, x) => a + x.lg.errors, 0) };
      console.log(`${(scenario + " c=" + conns + " " + name).padEnd(28)}${pad(f0(s[name].rps), 9)}` +
                  `${pad(ms(s[name].p50), 11)}${pad(ms(s[name].p99), 11)}${pad(s[name].errors, 11)}`);
    }
    if (s.edgenode && s.workerd)
      console.log(`${(scenario + " c=" + conns + " edgenode/workerd").padEnd(28)}` +
                  `${pad((s.edgenode.rps / s.workerd.rps).toFixed(2) + "x", 9)}` +
                  `${pad((s.edgenode.p50 / s.workerd.p50).toFixed(2) + "x", 11)}` +
                  `${pad((s.edgenode.p99 / s.workerd.p99).toFixed(2) + "x", 11)}`);
  }
}
console.log("");
for (const l of lines(process.argv[3])) {
  const [name, gap, json] = l.split("\t");
  const j = JSON.parse(json);
  const how = gap === "0" ? "back to back" : `${gap} ms idle before each`;
  console.log(`in-process load() -> first byte, ${name.padEnd(8)} ${how}: mean ${j.mean_ms.toFixed(2)} ms, ` +
              `p50 ${j.p50_ms.toFixed(2)} ms, p99 ${j.p99_ms.toFixed(2)} ms (batches of 10, ${j.loads} loads)`);
}
for (const l of lines(process.argv[4])) {
  const [name, seconds, before, peak, end, lg] = l.split("\t");
  const j = JSON.parse(lg);
  console.log(`RSS ${name.padEnd(8)} ${seconds} s cold loads (${f0(j.requests)} requests, ${f0(j.rps)}/s): ` +
              `${(before / 1024).toFixed(0)} -> peak ${(peak / 1024).toFixed(0)} MiB, ` +
              `${(end / 1024).toFixed(0)} MiB at the end`);
}
EOF

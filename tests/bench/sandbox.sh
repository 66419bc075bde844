#!/usr/bin/env bash
# What the sandbox (jail/) costs: two nodes side by side in one run, one as
# deployed (sandbox on) and one with --no-sandbox, the same workers on both,
# measured in turns so that whatever else the machine does falls on both
# alike. Each round measures every workload on both nodes, the node that goes
# first alternating from round to round; the figure kept is the median over
# rounds of each node, and of each round's on/off ratio.
#
#   hello     wrk -t2 -c64 on examples/hello.js: requests/s, and CPU per
#             request of the node's whole process group
#   cold      loadgen -c8 on the loader's /cold: a new dynamic worker per request
#   warm      loadgen -c64 on the loader's /warm: a cached dynamic worker
#   autocommit, txn, read
#             one connection on the facets worker: N_AUTO autocommit inserts,
#             N_TXN inserts in one transaction, N_READ point reads per request
#             (operations per second)
#
# Environment: ROUNDS (7), DURATION (seconds per measurement, 3), N_AUTO
# (300), N_TXN (20000), N_READ (20000), RESULTS (a file to append each
# measurement to, tab-separated: round, workload, node, value, CPU);
# BUILD_DIR / SKIP_BUILD as lib.sh.
set -euo pipefail

ROUNDS=${ROUNDS:-7}
DURATION=${DURATION:-3}
N_AUTO=${N_AUTO:-300}
N_TXN=${N_TXN:-20000}
N_READ=${N_READ:-20000}

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init sandbox.sh sandbox
bench_need cmake wrk node curl setsid
bench_build edgenode edgenode-worker edgenode-egress loadgen
loadgen=$build/bin/loadgen

echo "machine: $(machine_desc)"
echo "load: $DURATION s per measurement, $ROUNDS rounds, each workload on both nodes in turn"
report_busy

# --- the two nodes, the same workers ------------------------------------------
declare -A port control tokens pgid
start_node() { # NAME ARG...
  local name=$1
  shift
  EDGE_DATA=$tmp/$name edgenode_start "$(free_port)" "$(free_port)" --workers 2 --dev "$@"
  port[$name]=$edge_port
  control[$name]=$edge_control
  tokens[$name]=$token
  pgid[$name]=$edge_pid
}
say "starting two nodes: sandbox on, and --no-sandbox"
start_node on
start_node off --no-sandbox

cp "$repo/tests/bench/workers/loader_parent.js" "$tmp/parent.js"
cp "$repo/tests/bench/workers/facets_logic.js" "$tmp/logic.js"
cp "$repo/tests/bench/workers/facets_edgenode.js" "$tmp/facets.js"
deploy_json "$tmp/parent.json" '{"LOADER": {"type": "loader"}}' '{"cpu_ms": 1000, "wall_ms": 300000}' \
  "parent.js=$tmp/parent.js"
deploy_json "$tmp/facets.json" '{"DB": {"type": "facet"}}' '{"cpu_ms": 30000}' \
  "index.js=$tmp/facets.js" "logic.js=$tmp/logic.js"
for name in on off; do
  edge_control=${control[$name]} token=${tokens[$name]}
  edgenode_deploy parent "$tmp/parent.json"
  edgenode_deploy fbench "$tmp/facets.json"
  url=http://127.0.0.1:${port[$name]}
  wait_http "$name" "$url/" hello.localhost Hello
  wait_http "$name" "$url/warm" parent.localhost warm
  wait_http "$name" "$url/?op=setup" fbench.localhost ok
  # Rows for the reads, and V8 warmed on each path.
  curl -sf -o /dev/null -H 'Host: fbench.localhost' "$url/?op=insert_txn&n=$N_READ"
  for op in insert insert_txn read; do
    curl -sf -o /dev/null -H 'Host: fbench.localhost' "$url/?op=$op&n=1000"
  done
done

# --- one measurement: "value" (per second), and CPU per request for hello ------
measure() { # WORKLOAD NODE
  local url=http://127.0.0.1:${port[$2]} before after out requests
  case $1 in
    hello)
      before=$(group_ticks "${pgid[$2]}")
      out=$(wrk -t2 -c64 -d"${DURATION}s" -H 'Host: hello.localhost' "$url/")
      after=$(group_ticks "${pgid[$2]}")
      requests=$(sed -n 's/^[[:space:]]*\([0-9]*\) requests in.*/\1/p' <<<"$out")
      echo "$(sed -n 's/^Requests\/sec:[[:space:]]*//p' <<<"$out")" \
        "$(awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$requests" \
          'BEGIN { printf "%.2f", (n > 0 ? t * 1e6 / hz / n : 0) }')"
      ;;
    cold) rps_of 1 "$("$loadgen" -t1 -c8 -d"$DURATION" -H parent.localhost "$url/cold")" ;;
    warm) rps_of 1 "$("$loadgen" -t2 -c64 -d"$DURATION" -H parent.localhost "$url/warm")" ;;
    autocommit) facet_ops insert "$N_AUTO" "$url" ;;
    txn) facet_ops insert_txn "$N_TXN" "$url" ;;
    read) facet_ops read "$N_READ" "$url" ;;
  esac
}
rps_of() { # MULTIPLIER LOADGEN_JSON
  node -e 'const j = JSON.parse(process.argv[2]);
           if (j.errors) process.stderr.write(`warning: ${j.errors} errors\n`);
           console.log((j.rps * Number(process.argv[1])).toFixed(1));' "$1" "$2"
}
facet_ops() { # OP N URL
  rps_of "$2" "$("$loadgen" -t1 -c1 -d"$DURATION" -H fbench.localhost "$3/?op=$1&n=$2")"
}

workloads=(hello cold warm autocommit txn read)
: >"$tmp/results"
for round in $(seq "$ROUNDS"); do
  order=(on off)
  (( round % 2 == 0 )) && order=(off on)
  for w in "${workloads[@]}"; do
    for name in "${order[@]}"; do
      read -r value cpu < <(measure "$w" "$name")
      printf '%s\t%s\t%s\t%s\t%s\n' "$round" "$w" "$name" "$value" "${cpu:-}" >>"$tmp/results"
    done
  done
  say "round $round done"
done

[[ -n ${RESULTS:-} ]] && cat "$tmp/results" >>"$RESULTS"

# --- medians -------------------------------------------------------------------
node -e '
  const rows = require("fs").readFileSync(process.argv[1], "utf8").trim().split("\n")
    .map((l) => { const [round, w, node, value, cpu] = l.split("\t");
                  return { round: +round, w, node, value: +value, cpu: cpu === "" ? null : +cpu }; });
  const median = (a) => { const s = [...a].sort((x, y) => x - y); const m = s.length >> 1;
                          return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2; };
  const labels = { hello: "hello, requests/s", cold: "loader cold, requests/s",
    warm: "loader warm, requests/s", autocommit: "facets autocommit inserts/s",
    txn: "facets inserts in a transaction/s", read: "facets point reads/s" };
  const fmt = (v) => v.toLocaleString("en-US", { maximumFractionDigits: 0 });
  const line = (a, b, c, d) => console.log(a.padEnd(36) + b.padStart(14) + c.padStart(14) + d.padStart(22));
  console.log("");
  line(`medians of ${Math.max(...rows.map((r) => r.round))} rounds`, "sandbox on", "off", "on/off (range)");
  const of = (w, node, key) => rows.filter((r) => r.w === w && r.node === node).map((r) => r[key]);
  const ratios = (w, key) => [...new Set(rows.map((r) => r.round))].map((round) => {
    const on = rows.find((r) => r.round === round && r.w === w && r.node === "on")[key];
    const off = rows.find((r) => r.round === round && r.w === w && r.node === "off")[key];
    return on / off; });
  // The median of the ratios of the rounds, and their range.
  const ratioText = (w, key) => {
    const all = ratios(w, key);
    return `${median(all).toFixed(3)}x (${Math.min(...all).toFixed(2)}-${Math.max(...all).toFixed(2)})`;
  };
  for (const w of Object.keys(labels)) {
    line(labels[w], fmt(median(of(w, "on", "value"))), fmt(median(of(w, "off", "value"))),
         ratioText(w, "value"));
    if (w === "hello")
      line("hello, CPU per request (us)", median(of(w, "on", "cpu")).toFixed(2),
           median(of(w, "off", "cpu")).toFixed(2), ratioText(w, "cpu"));
  }
  console.log("\non/off: the median of the rounds\x27 ratios (above 1: faster with the sandbox; for CPU, above 1 costs more).");
' "$tmp/results"

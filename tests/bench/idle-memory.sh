#!/usr/bin/env bash
# Memory per idle worker: how much the resident memory (RSS) of a server
# grows per resident worker, edgenode against workerd, same run.
#
#   get()     a parent worker get()s N dynamic workers by distinct ids (each a
#             tiny module answering its id), in batches of BATCH per request,
#             on edgenode's loader and on workerd's (`serve --experimental`),
#             which keeps every one of them cached;
#   deployed  edgenode only: N workers deployed through the control API, each
#             requested once, so each holds a resident isolate.
#
# For each: RSS of the server's whole process group (edgenode: supervisor,
# worker process, egress process) after a warm-up, and again SETTLE seconds
# after the N workers were made; the growth divided by N is the figure.
# edgenode runs one worker process with room for every isolate (no eviction:
# --isolate-memory-mb 65536, --idle-timeout-s 3600), and a parent whose
# memory limit (1024 MB) gives its children room for all N: they share a
# budget of 8 times that limit, and past it the oldest idle ones go.
#
# Environment: N (1000), BATCH (100), SETTLE (seconds, 3), and as for every
# script here BUILD_DIR / BUILD, SKIP_BUILD=1, WORKERD.
set -euo pipefail

N=${N:-1000}
BATCH=${BATCH:-100}
SETTLE=${SETTLE:-3}
HOST_HEADER=parent.localhost

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init idle-memory.sh idle-memory
bench_need cmake npm node curl setsid ps
bench_build edgenode edgenode-worker
bench_workerd

mkdir -p "$tmp/workerd"
cat >"$tmp/workerd/parent.js" <<'EOF'
function code(id) {
  return { compatibilityDate: '2025-01-01', mainModule: 'child.js', globalOutbound: null,
           modules: { 'child.js': `export default { fetch() { return new Response(${JSON.stringify(id)}); } };` } };
}
// GET /?from=A&to=B: get()s children A .. B-1 and asks each for its id.
export default {
  async fetch(request, env) {
    const url = new URL(request.url);
    const from = Number(url.searchParams.get('from') ?? 0);
    const to = Number(url.searchParams.get('to') ?? 1);
    let ok = 0;
    for (let i = from; i < to; i++) {
      const id = 'child' + i;
      const res = await env.LOADER.get(id, async () => code(id)).getEntrypoint().fetch('http://child/');
      if ((await res.text()) === id) ok++;
    }
    return new Response(String(ok));
  },
};
EOF

echo "machine: $(machine_desc)"
echo "workerd: $("$workerd" --version 2>&1 | head -1)"
echo "workers: N=$N, get() in batches of $BATCH"
report_busy

# --- servers ---------------------------------------------------------------
say "starting edgenode (1 worker process)"
edgenode_start "$(free_port)" "$(free_port)" --workers 1 --log-level warn \
  --isolate-memory-mb 65536 --idle-timeout-s 3600
node -e '
  const fs = require("fs");
  process.stdout.write(JSON.stringify({ main_module: "parent.js",
    modules: { "parent.js": fs.readFileSync(process.argv[1], "utf8") },
    bindings: { LOADER: { type: "loader" } },
    limits: { cpu_ms: 30000, wall_ms: 300000, memory_mb: 1024 } }));' \
  "$tmp/workerd/parent.js" >"$tmp/parent.json"
edgenode_deploy parent "$tmp/parent.json"

wd_port=$(free_port)
workerd_config "$tmp/workerd" "$wd_port" parent.js '(name = "LOADER", workerLoader = ())'
say "starting workerd on 127.0.0.1:$wd_port"
workerd_start "$tmp/workerd" config.capnp --experimental

port_of() { [[ $1 == edgenode ]] && echo "$edge_port" || echo "$wd_port"; }
group_of() { [[ $1 == edgenode ]] && echo "$edge_pid" || echo "$wd_pid"; }
for name in edgenode workerd; do
  wait_http "$name" "http://127.0.0.1:$(port_of "$name")/?from=0&to=1" "$HOST_HEADER" '^1$'
done

# get() children [from, to) on one server, BATCH per request.
get_children() {
  local name=$1 from=$2 to=$3 i end got
  for (( i = from; i < to; i += BATCH )); do
    end=$(( i + BATCH < to ? i + BATCH : to ))
    got=$(curl -sf -m 600 -H "Host: $HOST_HEADER" "http://127.0.0.1:$(port_of "$name")/?from=$i&to=$end") ||
      die "$name: get() of children $i .. $end failed"
    [[ $got == $(( end - i )) ]] || die "$name: children $i .. $end answered $got"
  done
}

: >"$tmp/results"
# One measurement: RSS before, make the workers (command "$@"), settle, RSS after.
measure() {
  local label=$1 group=$2 before after t0 t1
  shift 2
  sleep "$SETTLE"
  before=$(rss_of "$group")
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  sleep "$SETTLE"
  after=$(rss_of "$group")
  printf '%s\t%s\t%s\t%s\n' "$label" "$before" "$after" "$(echo "$t1 - $t0" | bc)" >>"$tmp/results"
  printf '%-18s RSS %6d -> %6d MiB: %7.0f KiB per worker (made in %.1f s)\n' "$label" \
    $(( before / 1024 )) $(( after / 1024 )) "$(echo "($after - $before) / $N" | bc -l)" \
    "$(echo "$t1 - $t0" | bc)"
}

# Warm-up: the parent and one child run on both before the baseline.
get_children edgenode 0 1
get_children workerd 0 1
measure "edgenode get()" "$edge_pid" get_children edgenode 1 $(( N + 1 ))
measure "workerd get()" "$wd_pid" get_children workerd 1 $(( N + 1 ))

deploy_and_touch() {
  node "$repo/tests/bench/tenants.mjs" deploy "$edge_control" "$token" idle "$N" >"$tmp/deploy.json"
  node "$repo/tests/bench/tenants.mjs" touch "$edge_port" idle "$N" >"$tmp/touch.json"
  grep -q '"failed":0' "$tmp/touch.json" || die "not every deployed worker answered: $(cat "$tmp/touch.json")"
}
measure "edgenode deployed" "$edge_pid" deploy_and_touch
isolates=$(curl -sf -H "Authorization: Bearer $token" "http://127.0.0.1:$edge_control/v1/node" |
  node -e 'let s = ""; process.stdin.on("data", (d) => s += d).on("end", () => {
    console.log(JSON.parse(s).workers.map((w) => w.isolates).join(" ")); });')
echo "edgenode isolates resident per worker process: $isolates"

node - "$tmp/results" "$N" <<'EOF'
const fs = require('fs');
const n = Number(process.argv[3]);
const rows = Object.fromEntries(fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => {
  const [label, before, after] = l.split('\t');
  return [label, (after - before) / n];
}));
const kib = (v) => `${v.toFixed(0)} KiB`;
console.log('');
console.log(`RSS growth per resident worker (N = ${n})`);
for (const [label, v] of Object.entries(rows)) console.log(`  ${label.padEnd(20)}${kib(v).padStart(10)}`);
const e = rows['edgenode get()'], w = rows['workerd get()'];
console.log(`  ${'edgenode / workerd'.padEnd(20)}${((e / w).toFixed(2) + 'x').padStart(10)}  (get(), same run)`);
EOF

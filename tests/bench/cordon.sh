#!/usr/bin/env bash
# Cordon benchmark: a noisy tenant breaks a rule and is moved into a worker
# process of its own while a well-behaved tenant is under load.
#
# Measures, in one run:
#   - time from the noisy tenant's first rule-breaking request to the cordon
#     taking effect (its dedicated process ready, the shared processes told);
#   - requests lost during the move: a closed loop of loadgen against the
#     noisy tenant's well-behaved path runs through it; every error counts;
#   - p99 latency of the well-behaved tenant before, during and after the
#     move (loadgen, every response timed).
# Rule used: cpu_limit_hits >= 3 in 60s; the noisy tenant's /spin requests
# run into its 20 ms CPU limit, one after another, for the rest of the run.
#
# Environment: BUILD (build tree; default build-release, configured Release
# here), DURATION (seconds per phase, default 5), CONNECTIONS (loadgen
# connections against the steady tenant, default 8).
set -euo pipefail

DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-8}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$repo/build-release}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/edgenode-cordon-bench.XXXXXX")
pgid=
spinner=

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'cordon.sh: %s\n' "$*" >&2; exit 1; }

cleanup() {
  [[ -n $spinner ]] && kill "$spinner" 2>/dev/null || true
  if [[ -n $pgid ]]; then
    kill -TERM -- "-$pgid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 -- "-$pgid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pgid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

for tool in cmake node curl setsid; do command -v "$tool" >/dev/null || die "$tool is required"; done

if [[ -z ${BUILD:-} ]]; then
  say "building Release in $build"
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log" >&2; die "cmake configure failed"; }
fi
cmake --build "$build" -j2 --target edgenode edgenode-worker edgenode-egress loadgen \
  >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log" >&2; die "build failed"; }
loadgen=$build/bin/loadgen

free_port() {
  node -e 'const s = require("net").createServer();
           s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}
now_ms() { date +%s%3N; }
json() { node -e "let d='';process.stdin.on('data',c=>d+=c).on('end',()=>{const j=JSON.parse(d);console.log($1)})"; }

port=$(free_port)
control=$(free_port)
cat >"$tmp/config.json" <<EOF
{"cordon_rules": ["cpu_limit_hits >= 3 in 60s"]}
EOF
say "starting edgenode (2 worker processes) on 127.0.0.1:$port"
(cd "$repo" && exec setsid "$build/bin/edgenode" --listen "127.0.0.1:$port" --control "127.0.0.1:$control" \
  --data "$tmp/data" --workers 2 --config "$tmp/config.json" >"$tmp/edgenode.log" 2>&1) &
pgid=$!
for _ in $(seq 300); do grep -q '"msg":"ready"' "$tmp/edgenode.log" 2>/dev/null && break; sleep 0.1; done
grep -q '"msg":"ready"' "$tmp/edgenode.log" || { tail -20 "$tmp/edgenode.log" >&2; die "edgenode did not start"; }
token=$(cat "$tmp/data/control.token")
api() { curl -sS -H "Authorization: Bearer $token" "$@"; }

api -X PUT -H 'content-type: application/javascript' --data-binary @"$repo/examples/hello.js" \
  "http://127.0.0.1:$control/v1/workers/steady" >/dev/null
cat >"$tmp/noisy.json" <<'EOF'
{"main_module": "index.js", "limits": {"cpu_ms": 20},
 "modules": {"index.js": "export default { fetch(r) { if (new URL(r.url).pathname === '/spin') { while (true) {} } return new Response('ok'); } };"}}
EOF
api -X PUT -H 'content-type: application/json' --data-binary @"$tmp/noisy.json" \
  "http://127.0.0.1:$control/v1/workers/noisy" >/dev/null

steady() { "$loadgen" -c "$CONNECTIONS" -d "$1" -H steady.localhost "http://127.0.0.1:$port/"; }
echo "machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)"
say "warming up"
steady 2 >/dev/null
"$loadgen" -c 2 -d 1 -H noisy.localhost "http://127.0.0.1:$port/ok" >/dev/null

say "before: steady tenant alone for $DURATION s"
before=$(steady "$DURATION")

say "during: the noisy tenant breaks its rule and moves"
steady "$DURATION" >"$tmp/during.json" &
steady_pid=$!
"$loadgen" -c 4 -d "$((DURATION + 1))" -H noisy.localhost "http://127.0.0.1:$port/ok" >"$tmp/noisy.json" &
noisy_pid=$!
sleep 0.5
t0=$(now_ms)
( while :; do curl -s -o /dev/null -H 'Host: noisy.localhost' "http://127.0.0.1:$port/spin"; done ) &
spinner=$!
t1=
for _ in $(seq 1000); do
  state=$(api "http://127.0.0.1:$control/v1/tenants/noisy" | json 'j.state + " " + (j.dedicated ? j.dedicated.state : "-")')
  if [[ $state == "cordoned ready" ]]; then t1=$(now_ms); break; fi
  sleep 0.01
done
[[ -n $t1 ]] || die "the noisy tenant was not cordoned within 10 s"
wait "$steady_pid" "$noisy_pid"
during=$(cat "$tmp/during.json")
noisy=$(cat "$tmp/noisy.json")

say "after: steady tenant for $DURATION s, the noisy one still spinning in its own process"
after=$(steady "$DURATION")
kill "$spinner" 2>/dev/null || true
spinner=

p99() { json 'j.p99_us' <<<"$1"; }
rps() { json 'Math.round(j.rps)' <<<"$1"; }
# The supervisor's own timestamps split the delay: rule fired, process ready.
log_ms() { grep -m1 "$1" "$tmp/edgenode.log" | json 'Date.parse(j.time)'; }
fired=$(log_ms '"msg":"tenant cordoned')
ready=$(log_ms '"tenant":"noisy","msg":"worker ready"')
echo "cordon in effect after: $((t1 - t0)) ms (first /spin request -> dedicated process ready," \
  "as polled); rule fired at +$((fired - t0)) ms, dedicated process ready at +$((ready - t0)) ms"
echo "noisy tenant's other requests during the move: $(json 'j.requests' <<<"$noisy") sent, $(json 'j.errors' <<<"$noisy") lost"
printf 'steady tenant p99: before %s us, during %s us, after %s us\n' "$(p99 "$before")" "$(p99 "$during")" "$(p99 "$after")"
printf 'steady tenant req/s: before %s, during %s, after %s\n' "$(rps "$before")" "$(rps "$during")" "$(rps "$after")"
node -e "const b=$(p99 "$before"), d=$(p99 "$during"), a=$(p99 "$after");
  console.log('p99 ratio to before: during ' + (d/b).toFixed(2) + 'x, after ' + (a/b).toFixed(2) + 'x')"
api "http://127.0.0.1:$control/v1/tenants/noisy" | json '"noisy: " + j.state + ", rule " + j.rule + ", dedicated pid " + j.dedicated.pid'

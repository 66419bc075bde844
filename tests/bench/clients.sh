#!/usr/bin/env bash
# Agent-client latency: POST /v1/run of 50 different scripts, one at a time,
# through curl (a new process per call, as a shell agent would), through
# clients/js (one Node process, keep-alive fetch) and through clients/python
# (one Python process, urllib: a new connection per call), against one node.
# Prints p50 and p99 of each, and each client's p50 over curl's.
#
# Environment: ROUNDS (3: each round runs the 50 scripts on every client),
# BUILD_DIR (build-release), SKIP_BUILD=1 (use what is built there).
set -euo pipefail
ROUNDS=${ROUNDS:-3}

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init clients.sh clients
bench_need cmake cc curl node python3 setsid

bench_build edgenode edgenode-worker edgenode-egress
say "starting edgenode (2 worker processes)"
edgenode_start "$(free_port)" "$(free_port)" --workers 2
url="http://127.0.0.1:$edge_control"

# 50 scripts that differ in code, so no two calls are the same request.
mkdir -p "$tmp/scripts"
for i in $(seq 1 50); do
  printf '{"modules":{"index.js":"export function run(input) { let s = %d; for (let j = 0; j < input.n; j++) s += j %% %d; return { s }; }"},"input":{"n":%d}}' \
    "$i" "$((i + 1))" "$((i * 10))" >"$tmp/scripts/$i.json"
done

# curl: milliseconds per call, one line each
run_curl() {
  for f in "$tmp"/scripts/*.json; do
    curl -s -o /dev/null -w '%{time_total}\n' -X POST -H "Authorization: Bearer $token" \
      -H 'Content-Type: application/json' --data-binary "@$f" "$url/v1/run" |
      awk '{ printf "%.3f\n", $1 * 1000 }'
  done
}

run_js() {
  node --input-type=module - "$url" "$token" "$tmp/scripts" <<'JS'
import { readdirSync, readFileSync } from 'node:fs';
const [url, token, dir] = process.argv.slice(2);
const { Edgenode } = await import(process.env.CLIENT_JS);
const client = new Edgenode({ url, token });
for (const f of readdirSync(dir)) {
  const spec = JSON.parse(readFileSync(`${dir}/${f}`, 'utf8'));
  const t0 = process.hrtime.bigint();
  await client.run({ modules: spec.modules, input: spec.input });
  console.log((Number(process.hrtime.bigint() - t0) / 1e6).toFixed(3));
}
JS
}

run_py() {
  python3 - "$url" "$token" "$tmp/scripts" <<'PY'
import json, os, sys, time
sys.path.insert(0, os.environ["CLIENT_PY"])
import edgenode
url, token, d = sys.argv[1:]
client = edgenode.Edgenode(url=url, token=token)
for f in sorted(os.listdir(d)):
    spec = json.load(open(os.path.join(d, f)))
    t0 = time.perf_counter()
    client.run(modules=spec["modules"], input=spec["input"])
    print("%.3f" % ((time.perf_counter() - t0) * 1000))
PY
}

export CLIENT_JS="file://$repo/clients/js/edgenode.mjs" CLIENT_PY="$repo/clients/python"
: >"$tmp/curl.ms"; : >"$tmp/js.ms"; : >"$tmp/py.ms"
run_curl >/dev/null; run_js >/dev/null; run_py >/dev/null  # warm-up
for r in $(seq 1 "$ROUNDS"); do
  run_curl >>"$tmp/curl.ms"
  run_js >>"$tmp/js.ms"
  run_py >>"$tmp/py.ms"
  say "round $r done"
done

pct() { sort -n "$1" | awk -v p="$2" '{ a[NR] = $1 } END { i = int(NR * p + 0.5); if (i < 1) i = 1; print a[i] }'; }
c50=$(pct "$tmp/curl.ms" 0.5)
printf '%-8s %10s %10s %12s\n' client p50_ms p99_ms p50/curl
for c in curl js py; do
  p50=$(pct "$tmp/$c.ms" 0.5); p99=$(pct "$tmp/$c.ms" 0.99)
  printf '%-8s %10s %10s %12s\n' "$c" "$p50" "$p99" "$(awk -v a="$p50" -v b="$c50" 'BEGIN { printf "%.2fx", a / b }')"
done
echo "$((ROUNDS * 50)) calls per client, $ROUNDS rounds of 50 different scripts; machine: $(machine_desc)"

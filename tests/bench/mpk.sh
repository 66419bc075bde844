#!/usr/bin/env bash
# Cost of memory protection keys between isolates (docs/mpk.md).
#
# Builds tests/mpk/mpk_test in a Release tree (build-release/) and runs its
# --bench mode, which measures inside one process:
#   isolate switch      leave isolate A, enter B (V8's Isolate::Enter/Exit,
#                       plus two PKRU writes with MPK on), average of many
#   hello requests/s    hello-world fetch handlers through the isolate API,
#                       two tenants alternating, and CPU time per request
#   gc-heavy requests/s a handler that allocates ~100k objects and buffers
# in these configurations, alternating, ROUNDS times, and prints medians:
#   native  off         MPK off (what this machine runs without PKU)
#   native  dry         everything MPK changes except the key system calls
#                       and PKRU writes: the wrapped page allocator, the keyed
#                       ArrayBuffer arena and V8 --single-threaded
#   native  on          only where this CPU has PKU
#   emulated off / on   in QEMU TCG -cpu max (tests/mpk/run.sh), which has PKU
# Requests here skip HTTP: the figures are the isolate side of a request,
# which is where MPK adds work; an HTTP request costs more around it.
#
# Environment: SECONDS_PER_RUN (3), ROUNDS (3), EMULATED (1; 0 skips QEMU).
set -euo pipefail

SECONDS_PER_RUN=${SECONDS_PER_RUN:-3}
ROUNDS=${ROUNDS:-3}
EMULATED=${EMULATED:-1}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$repo/build-release
tmp=$(mktemp -d "${TMPDIR:-/tmp}/edgenode-mpk-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
say() { printf '== %s\n' "$*" >&2; }

say "building mpk_test in $build (Release)"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j2 --target mpk_test >/dev/null
bin=$build/tests/mpk_test

modes=(off dry)
grep -qw pku /proc/cpuinfo && modes+=(on)

# One run's figures: "switch_ns hello_rps hello_cpu_us gc_rps gc_cpu_ms".
figures() {
  awk '/isolate switch/ {s=$4} /hello requests/ {h=$4; hc=$6}
       /gc-heavy requests/ {g=$4; gc=$6} END {print s, h, hc, g, gc}' "$1"
}

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

report() { # label file-of-figure-lines
  local label=$1 f=$2
  printf '%-14s %10.1f ns %10.0f /s %8.2f us %8.2f /s %8.1f ms\n' "$label" \
    "$(cut -d' ' -f1 "$f" | median)" "$(cut -d' ' -f2 "$f" | median)" \
    "$(cut -d' ' -f3 "$f" | median)" "$(cut -d' ' -f4 "$f" | median)" \
    "$(cut -d' ' -f5 "$f" | median)"
}

for round in $(seq "$ROUNDS"); do
  for m in "${modes[@]}"; do
    say "native $m, round $round"
    "$bin" --bench "$m" "$SECONDS_PER_RUN" >"$tmp/out" 2>&1
    figures "$tmp/out" >>"$tmp/native-$m"
  done
done

if [ "$EMULATED" = 1 ]; then
  for round in $(seq "$ROUNDS"); do
    for m in off on; do
      say "emulated $m, round $round (QEMU TCG -cpu max)"
      if ! bash "$repo/tests/mpk/run.sh" "$bin" "$tmp/qemu" --bench "$m" "$SECONDS_PER_RUN" \
          >"$tmp/out" 2>&1; then
        tail -n 20 "$tmp/out" >&2
        say "emulated run failed or was skipped"
        EMULATED=0
        break 2
      fi
      figures "$tmp/out" >>"$tmp/emulated-$m"
    done
  done
fi

printf '\n%-14s %13s %13s %11s %11s %11s\n' "" "switch" "hello" "hello CPU" "gc-heavy" "gc CPU"
for m in "${modes[@]}"; do report "native $m" "$tmp/native-$m"; done
if [ "$EMULATED" = 1 ]; then
  for m in off on; do report "emulated $m" "$tmp/emulated-$m"; done
fi
echo "(medians of $ROUNDS runs of ${SECONDS_PER_RUN}s per figure; $(nproc) CPUs; $(uname -r))"

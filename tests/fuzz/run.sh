#!/usr/bin/env bash
# Builds the libFuzzer targets with clang in build-fuzz/ and runs each one
# for a while, starting from its seed corpus. Fails when a target crashes
# (the input that did it is left in build-fuzz/crashes/<name>/: replay it
# with build-fuzz/bin/<name>_fuzz <file>).
#   tests/fuzz/run.sh                 every target, 60 s each
#   tests/fuzz/run.sh -t 300          300 s each
#   tests/fuzz/run.sh -t 30 spec      only the named targets
# Inputs the fuzzer finds go to build-fuzz/corpus/<name>/, never into the
# seed corpora in tests/fuzz/corpus/ (add one there by hand when it is worth
# keeping in the normal test run).
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=60
while getopts "t:" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    *) echo "usage: $0 [-t SECONDS] [TARGET...]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(proto http_request spec egress_url egress_policy)
fi

build="$top/build-fuzz"
if ! command -v clang >/dev/null; then
  echo "fuzz: clang not found: run deploy/setup.sh (it installs clang and libclang-rt-dev)" >&2
  exit 1
fi
echo "==> configuring the fuzz build (build-fuzz/)"
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$top" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEDGENODE_FUZZ=ON "${launcher[@]}" >/dev/null
echo "==> building the fuzz targets"
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/%/_fuzz}"

failed=()
for name in "${targets[@]}"; do
  corpus="$build/corpus/$name" crashes="$build/crashes/$name" log="$build/fuzz-$name.log"
  mkdir -p "$corpus" "$crashes"
  echo "==> fuzzing $name for ${seconds}s (log: ${log#$top/})"
  # -fork would survive a crash and go on; a plain run stops at the first,
  # which is what CI wants. Leaks are errors (-detect_leaks=1 by default).
  if "$build/bin/${name}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$crashes/" \
       "$corpus" "$top/tests/fuzz/corpus/$name" >"$log" 2>&1; then
    grep -E '^(#[0-9]+.*DONE|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" \
      | sed "s/^/    /" || true
  else
    echo "fuzz: $name failed; the end of its log:" >&2
    tail -n 40 "$log" >&2
    ls "$crashes" >&2
    failed+=("$name")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "==> fuzz: no crashes in ${targets[*]} (${seconds}s each)"

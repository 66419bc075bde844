#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: ctest in the normal
# build, ctest again with the C code under AddressSanitizer + UBSan, then
# each libFuzzer target for 60 s. CI runs exactly this (.ci/run).
#   deploy/test.sh              all three, in that order (stops at the first failure)
#   deploy/test.sh --normal     only the normal build's ctest (build/)
#   deploy/test.sh --sanitize   only the sanitizer build's ctest (build-asan/)
#   deploy/test.sh --fuzz [-t SECONDS] [TARGET...]
#                               only the fuzz targets (build-fuzz/, clang; tests/fuzz/run.sh)
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$top/deploy/setup.sh"

run_ctest() { # build dir
  echo "==> running the tests (ctest in ${1#$top/})"
  (cd "$1" && ctest --output-on-failure --timeout 600 -j2)
}

sanitize() {
  local build="$top/build-asan"
  echo "==> configuring the sanitizer build (build-asan/)"
  # Optimised like the normal build: the tests exercise CPU limits, which -O0 code hits early.
  cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEDGENODE_SANITIZE=ON >/dev/null
  echo "==> building the sanitizer build"
  cmake --build "$build" -j"$(nproc)"
  # V8 reserves address space and keeps its own allocations: leak reports would be about V8.
  ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:${ASAN_OPTIONS:-}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" run_ctest "$build"
}

case "${1:-}" in
  --normal) run_ctest "$top/build" ;;
  --sanitize) sanitize ;;
  --fuzz) shift; exec "$top/tests/fuzz/run.sh" "$@" ;;
  "")
    run_ctest "$top/build"
    sanitize
    echo "==> fuzzing each target for 60 s"
    "$top/tests/fuzz/run.sh"
    ;;
  *) echo "usage: deploy/test.sh [--normal | --sanitize | --fuzz [-t SECONDS] [TARGET...]]" >&2; exit 2 ;;
esac

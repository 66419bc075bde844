#!/usr/bin/env bash
# Sets everything up and runs the whole test suite with ctest.
#   deploy/test.sh             normal build (build/)
#   deploy/test.sh --sanitize  C code under AddressSanitizer + UBSan (build-asan/)
#   deploy/test.sh --fuzz [-t SECONDS] [TARGET...]
#                              the libFuzzer targets, 60 s each (build-fuzz/,
#                              clang; see tests/fuzz/run.sh), instead of ctest
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$top/deploy/setup.sh"

if [ "${1:-}" = "--fuzz" ]; then
  shift
  exec "$top/tests/fuzz/run.sh" "$@"
fi

build="$top/build"
if [ "${1:-}" = "--sanitize" ]; then
  build="$top/build-asan"
  echo "==> configuring the sanitizer build (build-asan/)"
  # Optimised like the normal build: the tests exercise CPU limits, which -O0 code hits early.
  cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEDGENODE_SANITIZE=ON >/dev/null
  echo "==> building the sanitizer build"
  cmake --build "$build" -j"$(nproc)"
  # V8 reserves address space and keeps its own allocations: leak reports would be about V8.
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:${ASAN_OPTIONS:-}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
fi

echo "==> running the tests (ctest in ${build#$top/})"
cd "$build"
ctest --output-on-failure --timeout 600 -j2

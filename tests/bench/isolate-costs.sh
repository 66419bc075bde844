#!/usr/bin/env bash
# What one isolate costs, edgenode's against the floor this V8 sets:
#   - bare V8 (isolate/bench/bare_v8.cc): Isolate::New, a context running one
#     script, Dispose, and the memory an idle one keeps, with V8's own
#     snapshot and nothing of edgenode's;
#   - edgenode (the cost printout of tests/unit/isolate_test.c): a cold start
#     (isolate, context and runtime from edgenode's snapshot, the worker's
#     module, its first request, freeing it), the same from the pool of blank
#     isolates, what making a blank isolate costs, and the memory an idle
#     worker keeps after one request.
# No peer runs here: workerd's figures for the same questions are in
# loader.sh (cold loads) and idle-memory.sh (memory per idle worker).
#
# Environment: BUILD_DIR / BUILD, SKIP_BUILD=1, as for every script here.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init isolate-costs.sh isolate-costs
bench_need cmake
bench_build bare_v8_bench isolate_test
echo "machine: $(machine_desc)"
report_busy
say "bare V8"
"$build/bin/bare_v8_bench"
say "edgenode (tests/unit/isolate_test.c, test_costs)"
"$build/tests/isolate_test" 2>&1 |
  grep -E '^  (cold start|from the pool|an idle worker|hello dispatch)' ||
  die "isolate_test printed no costs (see its output)"

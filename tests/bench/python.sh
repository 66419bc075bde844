#!/usr/bin/env bash
# Python cold starts: a fresh /v1/run Python sandbox from request to
# result with the pool of booted interpreters warm and with it off, beside
# spawning python3 -c for the same code in the same run; fresh sandboxes
# per second back to back; memory per ready sandbox (docs/python.md).
#
# Environment: RUNS (40), GAP_MS (2500: between warm runs, so the pool
# refills), EMPTY_RUNS (10), POOL (2), MEMORY_POOL (4), BURST (20),
# PYTHON_DIR (Pyodide's package; default the build tree's pyodide/),
# MEMORY_ONLY=1 (only the memory figures), BUILD (build directory, default build-release).
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init python.sh python
bench_need cmake node python3
bench_build edgenode edgenode-worker
if [[ -z ${PYTHON_DIR:-} ]]; then
  PYTHON_DIR=$build/pyodide/node_modules/pyodide
  [[ -f $PYTHON_DIR/pyodide.asm.wasm ]] || PYTHON_DIR=$repo/build/pyodide/node_modules/pyodide
fi
[[ -f $PYTHON_DIR/pyodide.asm.wasm ]] || die "no Pyodide in $PYTHON_DIR: run deploy/setup.sh"
machine_desc
report_busy
EDGENODE_BIN_DIR=$build/bin PYTHON_DIR=$PYTHON_DIR node "$repo/tests/bench/python.mjs"

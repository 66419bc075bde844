#!/usr/bin/env bash
# Fleet benchmark: three edgenode nodes on a three-server NATS JetStream
# cluster behind HAProxy (deploy/fleet/haproxy.cfg), all on loopback.
#
#   tests/bench/fleet.sh
#
# Prints:
#   - deploy to served everywhere: for DEPLOYS deploys (default 100) on
#     node 1, the time from the deploy's answer until every node serves the
#     new version (p50, p99, max);
#   - failover: time from a node's SIGKILL until HAProxy (1 s checks,
#     fall 2) marks it down, and the requests that failed meanwhile, over
#     FAILOVERS kills (default 3);
#   - throughput: wrk -t2 -c64 -dDURATION through HAProxy against one node
#     directly, same worker, same run (DURATION default 10 s).
# Environment: DEPLOYS, FAILOVERS, DURATION; BUILD_DIR / SKIP_BUILD as lib.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init fleet.sh fleet
bench_need node wrk nats-server haproxy
bench_build edgenode edgenode-worker edgenode-egress
say "$(machine_desc)"
EDGENODE_BIN_DIR="$build/bin" EDGENODE_SOURCE_DIR="$repo" \
  DEPLOYS=${DEPLOYS:-100} FAILOVERS=${FAILOVERS:-3} DURATION=${DURATION:-10} \
  node "$repo/tests/bench/fleet.mjs"

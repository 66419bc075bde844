#!/usr/bin/env bash
# Replicated facet writes: a node alone beside a node of a fleet (three
# NATS JetStream servers, R=3) in one run, on loopback.
#
#   tests/bench/facets_fleet.sh
#
# Prints the latency of one write (p50, p99, and the fleet's added p50),
# writes per second on one facet, and the failover time after the owner's
# SIGKILL. Environment: WRITES, CLIENTS, DURATION, FAILOVERS, LEASE_MS;
# BUILD_DIR / SKIP_BUILD as lib.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init facets_fleet.sh facets_fleet
bench_need node nats-server
bench_build edgenode edgenode-worker edgenode-egress
say "$(machine_desc)"
EDGENODE_BIN_DIR="$build/bin" EDGENODE_SOURCE_DIR="$repo" node "$repo/tests/bench/facets_fleet.mjs"

#!/usr/bin/env bash
# Upgrades (or just restarts) a fleet's nodes one at a time, without failing
# a request: each node is drained, taken out by HAProxy, restarted by the
# command you give, and back in HAProxy before the next one starts.
#
#   deploy/fleet/rolling-upgrade.sh --restart 'ssh {host} systemctl restart edgenode' \
#       http://10.0.0.11:8081 http://10.0.0.12:8081 http://10.0.0.13:8081
#
# NODE is a node's control API URL. {host} in the command is replaced by the
# URL's host, {url} by the URL, {index} by the node's position (1, 2, ...).
# The control token comes from --token-file FILE (default: $EDGENODE_TOKEN,
# else ./data/control.token). Steps for each node, each printed:
#   1. POST /v1/node/drain: /readyz turns 503, so HAProxy's checks fail;
#   2. wait --out-wait seconds (HAProxy's inter x fall; default 3) so that
#      HAProxy has stopped sending before the listener closes;
#   3. wait until the node says it is drained (requests in flight done);
#   4. run the restart command;
#   5. wait until /readyz is 200 again (the new process has synced the
#      fleet's state), at most --timeout seconds (default 120);
#   6. wait --in-wait seconds (HAProxy's inter x rise; default 3).
# Exits non-zero, leaving the remaining nodes alone, when a step fails.
set -euo pipefail

restart=''
token_file=''
out_wait=3
in_wait=3
timeout=120
nodes=()
while [ $# -gt 0 ]; do
  case "$1" in
    --restart) restart=$2; shift 2 ;;
    --token-file) token_file=$2; shift 2 ;;
    --out-wait) out_wait=$2; shift 2 ;;
    --in-wait) in_wait=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "rolling-upgrade: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) nodes+=("$1"); shift ;;
  esac
done
[ -n "$restart" ] || { echo "rolling-upgrade: --restart CMD is required" >&2; exit 2; }
[ "${#nodes[@]}" -gt 0 ] || { echo "rolling-upgrade: no node URL given" >&2; exit 2; }

if [ -n "$token_file" ]; then
  token=$(tr -d '\n' < "$token_file")
elif [ -n "${EDGENODE_TOKEN:-}" ]; then
  token=$EDGENODE_TOKEN
else
  token=$(tr -d '\n' < data/control.token)
fi

step() { printf '==> %s\n' "$*"; }
status_of() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$1" || true; }
api() { curl -sS --fail-with-body --max-time 10 -H "Authorization: Bearer $token" "$@"; }

wait_for() { # seconds, description, command...
  local limit=$1 what=$2 start=$SECONDS
  shift 2
  until "$@"; do
    if [ $((SECONDS - start)) -ge "$limit" ]; then
      echo "rolling-upgrade: timed out after ${limit}s waiting for $what" >&2
      return 1
    fi
    sleep 0.2
  done
}
is_drained() { api "$1/v1/node" 2>/dev/null | grep -q '"state": *"drained"'; }
is_ready() { [ "$(status_of "$1/readyz")" = 200 ]; }

index=0
for url in "${nodes[@]}"; do
  index=$((index + 1))
  host=${url#*://}
  host=${host%%[:/]*}
  step "node $index ($url): draining"
  api -X POST "$url/v1/node/drain" >/dev/null
  step "node $index: waiting ${out_wait}s for the load balancer to take it out"
  sleep "$out_wait"
  wait_for "$timeout" "node $index to finish its requests" is_drained "$url"
  cmd=${restart//\{host\}/$host}
  cmd=${cmd//\{url\}/$url}
  cmd=${cmd//\{index\}/$index}
  step "node $index: $cmd"
  bash -c "$cmd"
  wait_for "$timeout" "node $index to be ready" is_ready "$url"
  step "node $index: ready; waiting ${in_wait}s for the load balancer to take it in"
  sleep "$in_wait"
done
step "all ${#nodes[@]} nodes done"

# What the benchmark scripts share: a Release build, workerd from npm,
# servers in process groups of their own, ports, readiness, clean-up and a
# description of the machine. Sourced, never run:
#
#   set -euo pipefail
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#   bench_init hello.sh hello        # name in messages, temporary directory tag
#
# bench_init sets: repo (the source tree), build (BUILD_DIR, or BUILD
# relative to the tree, default build-release), tmp (removed on exit), and
# installs the clean-up that kills every process group started with
# bench_spawn. A script may define bench_on_cleanup to stop more before that.

# Prints a progress line on stderr.
say() { printf '== %s\n' "$*" >&2; }

# Prints an error naming the script and exits.
die() {
  printf '%s: %s\n' "${bench_name:-bench}" "$*" >&2
  exit 1
}

bench_init() {
  bench_name=$1
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  if [[ -n ${BUILD_DIR:-} ]]; then
    build=$BUILD_DIR
  else
    build=$repo/${BUILD:-build-release}
  fi
  tmp=$(mktemp -d "${TMPDIR:-/tmp}/edgenode-$2-bench.XXXXXX")
  pgids=()
  trap bench_cleanup EXIT
  trap 'exit 130' INT TERM HUP
}

# Every server runs in its own process group (setsid), so one kill reaches
# edgenode's worker processes too, even if the supervisor is wedged.
bench_cleanup() {
  local g
  if declare -F bench_on_cleanup >/dev/null; then bench_on_cleanup || true; fi
  for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  for g in "${pgids[@]}"; do
    for _ in $(seq 50); do
      kill -0 -- "-$g" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL -- "-$g" 2>/dev/null || true
  done
  rm -rf "$tmp"
}

# Fails unless every named command is on PATH.
bench_need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || die "$tool is required"
  done
}

free_port() {
  node -e 'const s = require("net").createServer();
           s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Share of the CPUs busy over one second: other work on the machine skews
# both servers, so it is measured (and reported) before they start.
cpu_busy() {
  local a b
  a=($(head -1 /proc/stat)); sleep 1; b=($(head -1 /proc/stat))
  local total=0 idle=$(( (b[4] + b[5]) - (a[4] + a[5]) )) i
  for i in 1 2 3 4 5 6 7 8; do total=$(( total + b[i] - a[i] )); done
  echo $(( total > 0 ? 100 * (total - idle) / total : 0 ))
}

# "2 CPUs, <model>, 8 GiB RAM, Linux <release>"
machine_desc() {
  local model
  model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
  echo "$(nproc) CPUs, ${model:-unknown CPU}, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, Linux $(uname -r)"
}

# Prints the CPU share busy before the run, with a warning when it is high.
report_busy() {
  local busy
  busy=$(cpu_busy)
  echo "CPU busy before the run: $busy% (load average $(cut -d' ' -f1-3 /proc/loadavg))"
  if (( busy > 10 )); then
    echo "warning: other work is using the CPUs ($busy%); figures will be noisy" >&2
  fi
  return 0
}

# bench_build TARGET...: configures $build (BUILD_TYPE, default Release) and
# builds the targets; SKIP_BUILD=1 uses what is there.
bench_build() {
  if [[ ${SKIP_BUILD:-0} == 1 ]]; then
    say "using the binaries already in $build"
    return 0
  fi
  say "building ${BUILD_TYPE:-Release} in ${build#$repo/}/"
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log" >&2; die "cmake configure failed"; }
  cmake --build "$build" -j"$(nproc)" --target "$@" >"$tmp/build.log" 2>&1 ||
    { tail -40 "$tmp/build.log" >&2; die "build failed"; }
}

# Sets workerd to a workerd binary: WORKERD, or the one cached in
# build-release/bench-cache, installed there from npm when missing.
bench_workerd() {
  local cache=$repo/build-release/bench-cache
  workerd=${WORKERD:-$cache/workerd}
  [[ -x $workerd ]] && return 0
  bench_need npm
  say "installing the npm package workerd"
  npm install --prefix "$tmp/npm" --no-audit --no-fund workerd >"$tmp/npm.log" 2>&1 ||
    { cat "$tmp/npm.log" >&2; die "npm install workerd failed"; }
  mkdir -p "$cache"
  cp "$tmp/npm/node_modules/@cloudflare/workerd-linux-64/bin/workerd" "$cache/workerd.part"
  mv "$cache/workerd.part" "$cache/workerd"
  workerd=$cache/workerd
}

# bench_spawn DIR LOG COMMAND...: runs the command in DIR, in a process
# group of its own, output to LOG; sets spawned to its pid (= its group).
bench_spawn() {
  local dir=$1 log=$2
  shift 2
  (cd "$dir" && exec setsid "$@" >"$log" 2>&1) &
  spawned=$!
  disown "$spawned"  # the clean-up kills it: no job report for that
  pgids+=("$spawned")
}

# edgenode_start PORT CONTROL ARG...: starts the supervisor on 127.0.0.1
# with its data in $tmp/data, or EDGE_DATA for a second node, its log beside
# it (more flags in ARG..., and in EDGENODE_ARGS, as EDGENODE_ARGS=--no-sandbox
# to measure without the sandbox), waits until its control API is ready and
# sets edge_pid, edge_port, edge_control and token.
edgenode_start() {
  edge_port=$1
  edge_control=$2
  shift 2
  local data=${EDGE_DATA:-$tmp/data} log=${EDGE_DATA:+$EDGE_DATA.log}
  log=${log:-$tmp/edgenode.log}
  bench_spawn "$repo" "$log" "$build/bin/edgenode" --listen "127.0.0.1:$edge_port" \
    --control "127.0.0.1:$edge_control" --data "$data" "$@" ${EDGENODE_ARGS:-}
  edge_pid=$spawned
  for _ in $(seq 300); do
    curl -sf "http://127.0.0.1:$edge_control/readyz" >/dev/null 2>&1 && break
    kill -0 "$edge_pid" 2>/dev/null || { tail -20 "$log" >&2; die "edgenode exited"; }
    sleep 0.1
  done
  curl -sf "http://127.0.0.1:$edge_control/readyz" >/dev/null 2>&1 ||
    { tail -20 "$log" >&2; die "edgenode did not become ready in 30 s"; }
  token=$(cat "$data/control.token")
}

# deploy_json OUT BINDINGS LIMITS NAME=FILE...: writes a deploy body to OUT,
# the modules read from the files under their names, the first the main one;
# BINDINGS and LIMITS are JSON objects.
deploy_json() {
  node -e '
    const fs = require("fs");
    const [out, bindings, limits, ...mods] = process.argv.slice(1);
    const modules = {};
    for (const m of mods) {
      const [name, file] = m.split("=");
      modules[name] = fs.readFileSync(file, "utf8");
    }
    const body = { main_module: mods[0].split("=")[0], modules,
                   bindings: JSON.parse(bindings), limits: JSON.parse(limits) };
    fs.writeFileSync(out, JSON.stringify(body));' "$@"
}

# edgenode_deploy NAME FILE: PUTs the JSON in FILE as worker NAME.
edgenode_deploy() {
  local status
  status=$(curl -s -o "$tmp/deploy.out" -w '%{http_code}' -X PUT \
    -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    --data-binary "@$2" "http://127.0.0.1:$edge_control/v1/workers/$1")
  [[ $status == 2* ]] || { cat "$tmp/deploy.out" >&2; die "deploying $1 failed ($status)"; }
}

# workerd_config DIR PORT MODULE [BINDINGS]: writes DIR/config.capnp, one
# worker serving the ES module DIR/MODULE on 127.0.0.1:PORT; BINDINGS is its
# capnp binding list, e.g. '(name = "LOADER", workerLoader = ())'.
workerd_config() {
  local dir=$1 port=$2 module=$3 bindings=${4:-}
  cat >"$dir/config.capnp" <<CAPNP
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [ (name = "main", worker = .main) ],
  sockets = [ (name = "http", address = "127.0.0.1:$port", http = (), service = "main") ],
);
const main :Workerd.Worker = (
  modules = [ (name = "$module", esModule = embed "$module") ],
  compatibilityDate = "2025-01-01",
  bindings = [ $bindings ],
);
CAPNP
}

# workerd_start DIR CONFIG [ARG...]: `workerd serve` with CONFIG (a file in
# DIR) and ARG... before it; sets wd_pid.
workerd_start() {
  local dir=$1 config=$2
  shift 2
  bench_spawn "$dir" "$tmp/workerd.log" "$workerd" serve "$@" "$config"
  wd_pid=$spawned
}

# wait_http NAME URL HOST PATTERN: waits up to 30 s until URL (with that
# Host header) answers 2xx with a body matching PATTERN.
wait_http() {
  local name=$1 url=$2 host=$3 pattern=$4
  for _ in $(seq 300); do
    if curl -sf -m 5 -H "Host: $host" "$url" 2>/dev/null | grep -q -- "$pattern"; then
      return 0
    fi
    sleep 0.1
  done
  tail -20 "$tmp/$name.log" >&2 || true
  die "$name does not answer $url"
}

# RSS in KiB of every process of a process group.
rss_of() {
  ps -o rss= -s "$1" 2>/dev/null | awk '{ s += $1 } END { print s + 0 }'
}

# CPU time (user + system, clock ticks) used so far by every process of a
# process group.
group_ticks() {
  local pid total=0 stat rest f
  for pid in $(pgrep -g "$1"); do
    stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    rest=${stat##*) }         # the command name may contain spaces
    read -r -a f <<<"$rest"   # f[11], f[12] = utime, stime (fields 14, 15)
    total=$(( total + f[11] + f[12] ))
  done
  echo "$total"
}

#!/usr/bin/env bash
# Facets benchmark: single-row inserts (autocommit, and inside one
# transaction) and point reads per second, measured four ways in one run:
#   raw        SQLite from C with a prepared statement, on the settings of a
#              facet (WAL, synchronous=FULL, mmap): the physical limit
#   facet_call the facets/ C API without JavaScript (facets_test --bench)
#   edgenode   env.DB.exec from a deployed worker
#   workerd    ctx.storage.sql.exec in a SQLite-backed Durable Object running
#              the same logic module (npm package `workerd`)
# The JavaScript paths run N operations per HTTP request, so the request's
# own cost is a small share; the time is the client's, per request. Durable
# Objects only make a request's writes durable when it ends (the output
# gate), so their "autocommit" inserts are one batch: compare that row with
# the transaction row, not with a facet's fsync per statement.
#
# Environment: ROUNDS (3), N_AUTO (autocommit inserts per request, 300),
# N_TXN (inserts per transaction, 50000), N_READ (reads per request, 50000),
# BUILD_DIR (build-release), BUILD_TYPE (Release), SKIP_BUILD=1 (use what is
# built there), WORKERD (a workerd binary; default: the one
# tests/bench/hello.sh caches, installed with npm when missing).
set -euo pipefail

ROUNDS=${ROUNDS:-3}
N_AUTO=${N_AUTO:-300}
N_TXN=${N_TXN:-50000}
N_READ=${N_READ:-50000}

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$repo/build-release}
cache=$repo/build-release/bench-cache
tmp=$(mktemp -d "${TMPDIR:-/tmp}/edgenode-facets-bench.XXXXXX")
pgids=()

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'facets.sh: %s\n' "$*" >&2; exit 1; }

cleanup() {
  local g
  for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  for g in "${pgids[@]}"; do
    for _ in $(seq 50); do kill -0 -- "-$g" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$g" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

for tool in cmake cc curl node setsid; do
  command -v "$tool" >/dev/null || die "$tool is required"
done

free_port() {
  node -e 'const s = require("net").createServer();
           s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# --- build -----------------------------------------------------------------
if [[ ${SKIP_BUILD:-0} == 1 ]]; then
  say "using the binaries already in $build"
else
  say "building ${BUILD_TYPE:-Release} in $build"
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" >"$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log" >&2; die "cmake configure failed"; }
  cmake --build "$build" -j"$(nproc)" --target edgenode edgenode-worker facets_test \
    >"$tmp/build.log" 2>&1 || { tail -40 "$tmp/build.log" >&2; die "build failed"; }
fi

# --- workerd ---------------------------------------------------------------
workerd=${WORKERD:-$cache/workerd}
if [[ ! -x $workerd ]]; then
  command -v npm >/dev/null || die "npm is required to install workerd"
  say "installing the npm package workerd"
  npm install --prefix "$tmp/npm" --no-audit --no-fund workerd >"$tmp/npm.log" 2>&1 ||
    { cat "$tmp/npm.log" >&2; die "npm install workerd failed"; }
  mkdir -p "$cache"
  cp "$tmp/npm/node_modules/@cloudflare/workerd-linux-64/bin/workerd" "$cache/workerd.part"
  mv "$cache/workerd.part" "$cache/workerd"
  workerd=$cache/workerd
fi

# --- the same logic for both JavaScript runtimes ---------------------------
mkdir -p "$tmp/js"
cat >"$tmp/js/logic.js" <<'EOF'
// GET /?op=setup|insert|insert_txn|read&n=N: N operations, one exec each.
export function run(sql, transactionSync, url) {
  const op = url.searchParams.get('op');
  const n = Number(url.searchParams.get('n') ?? 0);
  switch (op) {
    case 'setup':
      sql.exec('CREATE TABLE IF NOT EXISTS kv (k INTEGER PRIMARY KEY, v TEXT)');
      break;
    case 'insert':
      for (let i = 0; i < n; i++) sql.exec('INSERT INTO kv (v) VALUES (?)', 'value ' + i);
      break;
    case 'insert_txn':
      transactionSync(() => {
        for (let i = 0; i < n; i++) sql.exec('INSERT INTO kv (v) VALUES (?)', 'value ' + i);
      });
      break;
    case 'read': {
      const max = sql.exec('SELECT max(k) AS m FROM kv').one().m;
      let bytes = 0;
      for (let i = 0; i < n; i++) {
        bytes += sql.exec('SELECT v FROM kv WHERE k = ?', 1 + ((i * 7919) % max)).one().v.length;
      }
      if (bytes === 0) throw new Error('nothing read');
      break;
    }
    default:
      return new Response('unknown op', { status: 400 });
  }
  return new Response(`ok ${n}`);
}
EOF
cat >"$tmp/js/edgenode.js" <<'EOF'
import { run } from './logic.js';
export default {
  fetch(request, env) {
    return run(env.DB, (fn) => env.DB.transactionSync(fn), new URL(request.url));
  },
};
EOF
cat >"$tmp/js/workerd.js" <<'EOF'
import { DurableObject } from 'cloudflare:workers';
import { run } from './logic.js';
export class Bench extends DurableObject {
  fetch(request) {
    const storage = this.ctx.storage;
    return run(storage.sql, (fn) => storage.transactionSync(fn), new URL(request.url));
  }
}
export default {
  fetch(request, env) {
    return env.BENCH.get(env.BENCH.idFromName('bench')).fetch(request);
  },
};
EOF

# --- raw SQLite from C -----------------------------------------------------
cat >"$tmp/raw.c" <<'EOF'
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}
static void must(int rc, sqlite3 *db, const char *what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
    fprintf(stderr, "%s: %s\n", what, sqlite3_errmsg(db));
    exit(1);
  }
}
int main(int argc, char **argv) {
  sqlite3 *db;
  int n_auto = atoi(argv[2]), n_txn = atoi(argv[3]), n_read = atoi(argv[4]);
  must(sqlite3_open(argv[1], &db), db, "open");
  must(sqlite3_exec(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; "
                        "PRAGMA mmap_size = 268435456; PRAGMA foreign_keys = ON; "
                        "CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT)", 0, 0, 0), db, "setup");
  sqlite3_stmt *ins, *sel;
  must(sqlite3_prepare_v2(db, "INSERT INTO kv (v) VALUES (?)", -1, &ins, 0), db, "prepare");
  must(sqlite3_prepare_v2(db, "SELECT v FROM kv WHERE k = ?", -1, &sel, 0), db, "prepare");
  char v[32];
  double t0 = now();
  for (int i = 0; i < n_auto; i++) {
    snprintf(v, sizeof v, "value %d", i);
    sqlite3_bind_text(ins, 1, v, -1, SQLITE_TRANSIENT);
    must(sqlite3_step(ins), db, "insert");
    sqlite3_reset(ins);
  }
  double auto_rate = n_auto / (now() - t0);
  t0 = now();
  must(sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0), db, "begin");
  for (int i = 0; i < n_txn; i++) {
    snprintf(v, sizeof v, "value %d", i);
    sqlite3_bind_text(ins, 1, v, -1, SQLITE_TRANSIENT);
    must(sqlite3_step(ins), db, "insert");
    sqlite3_reset(ins);
  }
  must(sqlite3_exec(db, "COMMIT", 0, 0, 0), db, "commit");
  double txn_rate = n_txn / (now() - t0);
  int max = n_auto + n_txn;
  long bytes = 0;
  t0 = now();
  for (int i = 0; i < n_read; i++) {
    sqlite3_bind_int64(sel, 1, 1 + ((long long)i * 7919) % max);
    must(sqlite3_step(sel), db, "read");
    bytes += sqlite3_column_bytes(sel, 0);
    sqlite3_reset(sel);
  }
  double read_rate = n_read / (now() - t0);
  printf("{\"insert\":%.0f,\"insert_txn\":%.0f,\"read\":%.0f,\"bytes\":%ld}\n", auto_rate,
         txn_rate, read_rate, bytes);
  return 0;
}
EOF
cc -O2 -o "$tmp/raw" "$tmp/raw.c" -lsqlite3 || die "cannot compile the raw SQLite program"

# --- machine ---------------------------------------------------------------
cpu_model=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -1)
echo "machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, Linux $(uname -r), SQLite $(sqlite3 -version 2>/dev/null | cut -d' ' -f1)"
echo "workerd: $("$workerd" --version 2>&1 | head -1)"
echo "per request: $N_AUTO autocommit inserts, $N_TXN inserts in one transaction, $N_READ point reads; $ROUNDS rounds"

# --- servers ---------------------------------------------------------------
edge_port=$(free_port)
edge_control=$(free_port)
wd_port=$(free_port)

say "starting edgenode on 127.0.0.1:$edge_port (one worker process)"
(cd "$tmp" && exec setsid "$build/bin/edgenode" --listen "127.0.0.1:$edge_port" \
  --control "127.0.0.1:$edge_control" --data "$tmp/data" --workers 1 \
  >"$tmp/edgenode.log" 2>&1) &
pgids+=("$!")
for _ in $(seq 300); do
  grep -q '"msg":"ready"' "$tmp/edgenode.log" 2>/dev/null && break
  sleep 0.1
done
grep -q '"msg":"ready"' "$tmp/edgenode.log" || { tail -20 "$tmp/edgenode.log" >&2; die "edgenode did not start"; }
token=$(cat "$tmp/data/control.token")
node -e '
  const fs = require("fs");
  const dir = process.argv[1];
  const body = {
    main_module: "index.js",
    modules: { "index.js": fs.readFileSync(dir + "/edgenode.js", "utf8"),
               "logic.js": fs.readFileSync(dir + "/logic.js", "utf8") },
    bindings: { DB: { type: "facet" } },
    limits: { cpu_ms: 30000 },
  };
  fs.writeFileSync(dir + "/deploy.json", JSON.stringify(body));' "$tmp/js"
status=$(curl -s -o "$tmp/deploy.out" -w '%{http_code}' -X PUT \
  -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
  --data-binary @"$tmp/js/deploy.json" "http://127.0.0.1:$edge_control/v1/workers/fbench")
[[ $status == 2* ]] || { cat "$tmp/deploy.out" >&2; die "deploy failed ($status)"; }

mkdir -p "$tmp/workerd-do"
cat >"$tmp/js/config.capnp" <<EOF
using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [
    (name = "main", worker = .bench),
    (name = "do-disk", disk = (path = "$tmp/workerd-do", writable = true)),
  ],
  sockets = [ (name = "http", address = "127.0.0.1:$wd_port", http = (), service = "main") ],
);
const bench :Workerd.Worker = (
  modules = [
    (name = "workerd.js", esModule = embed "workerd.js"),
    (name = "logic.js", esModule = embed "logic.js"),
  ],
  compatibilityDate = "2025-01-01",
  durableObjectNamespaces = [ (className = "Bench", uniqueKey = "facets-bench", enableSql = true) ],
  durableObjectStorage = (localDisk = "do-disk"),
  bindings = [ (name = "BENCH", durableObjectNamespace = "Bench") ],
);
EOF
say "starting workerd on 127.0.0.1:$wd_port"
(cd "$tmp/js" && exec setsid "$workerd" serve config.capnp >"$tmp/workerd.log" 2>&1) &
pgids+=("$!")

url_of() {
  [[ $1 == edgenode ]] && echo "http://127.0.0.1:$edge_port" || echo "http://127.0.0.1:$wd_port"
}

# Seconds one request took; fails unless it answered "ok N".
timed() {
  local name=$1 op=$2 n=$3 out
  out=$(curl -s -o "$tmp/body" -w '%{http_code} %{time_total}' -H 'Host: fbench.localhost' \
    "$(url_of "$name")/?op=$op&n=$n") || die "$name $op: request failed"
  [[ ${out%% *} == 200 && $(cat "$tmp/body") == "ok $n" ]] ||
    die "$name $op: ${out%% *} $(head -c 300 "$tmp/body")"
  echo "${out#* }"
}

for name in edgenode workerd; do
  for _ in $(seq 100); do
    curl -sf -o /dev/null -H 'Host: fbench.localhost' "$(url_of "$name")/?op=setup" && break
    sleep 0.1
  done
  timed "$name" setup 0 >/dev/null
  # warm up: compile the code paths, fill the table a little
  timed "$name" insert_txn 1000 >/dev/null
  timed "$name" read 1000 >/dev/null
done

# --- measure ---------------------------------------------------------------
: >"$tmp/results"
for round in $(seq "$ROUNDS"); do
  rm -f "$tmp/raw.sqlite"*
  echo "raw $round $("$tmp/raw" "$tmp/raw.sqlite" "$N_AUTO" "$N_TXN" "$N_READ")" >>"$tmp/results"
  rm -rf "$tmp/fc" && mkdir -p "$tmp/fc"
  fc=$(N_AUTO=$N_AUTO N_TXN=$N_TXN N_READ=$N_READ SYNC=FULL "$build/tests/facets_test" --bench "$tmp/fc")
  echo "facet_call $round $fc" >>"$tmp/results"
  for name in edgenode workerd; do
    a=$(timed "$name" insert "$N_AUTO")
    t=$(timed "$name" insert_txn "$N_TXN")
    r=$(timed "$name" read "$N_READ")
    printf '%s %s {"insert":%s,"insert_txn":%s,"read":%s}\n' "$name" "$round" \
      "$(node -e "console.log(($N_AUTO / $a).toFixed(0))")" \
      "$(node -e "console.log(($N_TXN / $t).toFixed(0))")" \
      "$(node -e "console.log(($N_READ / $r).toFixed(0))")" >>"$tmp/results"
  done
  say "round $round done"
done

# --- summary ---------------------------------------------------------------
node - "$tmp/results" <<'EOF'
const fs = require('fs');
const rows = fs.readFileSync(process.argv[2], 'utf8').trim().split('\n').map((l) => {
  const [name, round, ...rest] = l.split(' ');
  const j = JSON.parse(rest.join(' '));
  // facets_test --bench names its figures differently
  if (name === 'facet_call') {
    return { name, round, insert: j.insert_autocommit_per_s, insert_txn: j.insert_in_transaction_per_s,
             read: j.point_read_per_s };
  }
  return { name, round, ...j };
});
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b), m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};
const names = ['raw', 'facet_call', 'edgenode', 'workerd'];
const ops = [['insert', 'insert, autocommit'], ['insert_txn', 'insert, in a transaction'],
             ['read', 'point read']];
const med = {};
for (const n of names) {
  med[n] = {};
  for (const [op] of ops) med[n][op] = median(rows.filter((r) => r.name === n).map((r) => +r[op]));
}
const f0 = (v) => Math.round(v).toLocaleString('en-US');
const pad = (s, w) => String(s).padStart(w);
console.log('');
console.log(`medians, operations/s        ${names.map((n) => pad(n, 12)).join('')}  edgenode/raw  edgenode/workerd`);
for (const [op, label] of ops) {
  const e = med.edgenode[op];
  console.log(`${label.padEnd(28)} ${names.map((n) => pad(f0(med[n][op]), 12)).join('')}` +
              `${pad((e / med.raw[op]).toFixed(2) + 'x', 14)}${pad((e / med.workerd[op]).toFixed(2) + 'x', 18)}`);
}
console.log('(workerd commits a request\'s writes together at its end: its autocommit row is batched work)');
EOF

/*
 * Memory protection keys between isolates, tested for real.
 *
 * Run by tests/mpk/run.sh inside an emulated machine that has PKU (QEMU TCG,
 * -cpu max) with `--expect on`, and natively with `--expect dry` (every code
 * path but the key system calls and PKRU writes) and `--expect off`.
 *
 *   mpk_test --expect on|dry|off [--no-workers]
 *   mpk_test --bench on|off|dry SECONDS       (figures for tests/bench/mpk.sh)
 *
 * Prints one "ok - ..." or "not ok - ..." line per check and ends with
 * "MPK-TEST: PASS" or "MPK-TEST: FAIL" (what run.sh looks for on the
 * emulated machine's serial console); exit status 0 or 1.
 *
 * With keys on: two isolates A and B get different keys; while A is entered,
 * reading B's heap or B's ArrayBuffer contents faults with SEGV_PKUERR and
 * B's key, and the worker process's handler (worker/mpk.c) reports the
 * tenant that was running to the supervisor link and the process dies of
 * the fault (each in a child process); with B entered the same reads
 * succeed. Then real workers (requests, GC-heavy code, promises, timers,
 * ArrayBuffers of every size class) run in more isolates than there are keys.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base.h"
#include "isolate.h"
#include "mpk.h"
#include "proto.h"
#include "sandbox.h"

static int failures;

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%s - ", ok ? "ok" : "not ok");
  vprintf(fmt, ap);
  printf("\n");
  fflush(stdout);
  va_end(ap);
  if (!ok) failures++;
}

/* ---- a small host: one tenant per isolate, timers run in delay order ---- */

#define MAX_TIMERS 256

typedef struct test_worker {
  sandbox l; /* first: worker/mpk.c finds the tenant through it, as in edgenode-worker */
  tenant t;
  iso_worker *iso;
  int status;
  char body[256];
  int responded;
  int done;
} test_worker;

typedef struct timer {
  test_worker *tw;
  uint64_t token;
  uint32_t id;
  double due;
  int live;
} timer;

static timer timers[MAX_TIMERS];
static double clock_ms; /* virtual: timers fire in order, no waiting */

static void host_log(void *data, uint64_t token, iso_log_level level, const char *msg,
                     size_t len) {
  (void)data, (void)token, (void)level;
  printf("  console: %.*s\n", (int)len, msg);
}

static int host_timer_start(void *data, uint64_t token, uint32_t id, double delay_ms) {
  for (int i = 0; i < MAX_TIMERS; i++) {
    if (timers[i].live) continue;
    timers[i] = (timer){data, token, id, clock_ms + delay_ms, 1};
    return 0;
  }
  return -1;
}

static void host_timer_cancel(void *data, uint32_t id) {
  for (int i = 0; i < MAX_TIMERS; i++)
    if (timers[i].live && timers[i].tw == data && timers[i].id == id) timers[i].live = 0;
}

static void host_respond(void *data, uint64_t token, const iso_response *res,
                         const iso_error *err) {
  (void)token;
  test_worker *tw = data;
  tw->responded++;
  if (res == NULL) {
    tw->status = -1;
    snprintf(tw->body, sizeof tw->body, "%s", err && err->message ? err->message : "?");
    return;
  }
  tw->status = res->status;
  size_t n = res->body_len < sizeof tw->body - 1 ? res->body_len : sizeof tw->body - 1;
  memcpy(tw->body, res->body, n);
  tw->body[n] = '\0';
}

static void host_done(void *data, uint64_t token) {
  (void)token;
  ((test_worker *)data)->done++;
}

static const iso_host host_template = {NULL, host_log, host_timer_start, host_timer_cancel,
                                       host_respond, host_done, NULL};

/* Fires due timers, earliest first, until none is left. */
static void run_timers(void) {
  for (;;) {
    int next = -1;
    for (int i = 0; i < MAX_TIMERS; i++)
      if (timers[i].live && (next < 0 || timers[i].due < timers[next].due)) next = i;
    if (next < 0) return;
    timer t = timers[next];
    timers[next].live = 0;
    if (t.due > clock_ms) clock_ms = t.due;
    iso_worker_fire_timer(t.tw->iso, t.token, t.id);
  }
}

static test_worker *worker_start(const char *name, const char *source) {
  test_worker *tw = xcalloc(1, sizeof *tw);
  tw->t.name = xstrdup(name);
  tw->l.tenant = &tw->t;
  tw->l.log_tenant = tw->t.name;
  iso_host host = host_template;
  host.data = tw;
  iso_module mod = {"index.js", source, strlen(source)};
  iso_limits limits = {0, 60000}; /* emulated, the CPU is tens of times slower */
  iso_error err = {0};
  tw->iso = iso_worker_new(&host, &limits, &mod, 1, "index.js", NULL, &err);
  if (tw->iso == NULL) {
    check(0, "%s loads: %s", name, err.message ? err.message : "?");
    iso_error_clear(&err);
    free(tw->t.name);
    free(tw);
    return NULL;
  }
  return tw;
}

static void worker_stop(test_worker *tw) {
  if (tw == NULL) return;
  host_timer_cancel(tw, 0);
  for (int i = 0; i < MAX_TIMERS; i++)
    if (timers[i].tw == tw) timers[i].live = 0;
  iso_worker_free(tw->iso);
  free(tw->t.name);
  free(tw);
}

/* One request, its timers run; 1 when it answered 200 with `want` (NULL: anything). */
static int request(test_worker *tw, uint64_t token, const char *path, const char *want) {
  char url[128];
  snprintf(url, sizeof url, "http://%s.localhost%s", tw->t.name, path);
  iso_request req = {"GET", 3, url, strlen(url), NULL, 0, NULL, 0};
  tw->responded = tw->done = 0;
  tw->status = 0;
  if (iso_worker_dispatch(tw->iso, token, &req) != 0) return 0;
  run_timers();
  if (tw->responded != 1 || tw->done != 1 || tw->status != 200) {
    printf("  %s %s: responded %d done %d status %d body %s\n", tw->t.name, path,
           tw->responded, tw->done, tw->status, tw->body);
    return 0;
  }
  if (want && strcmp(tw->body, want) != 0) {
    printf("  %s %s: body %s, want %s\n", tw->t.name, path, tw->body, want);
    return 0;
  }
  return 1;
}

/* ---- what the kernel says about a page ---- */

/* The ProtectionKey of the mapping holding `addr` in /proc/self/smaps, or -1. */
static int smaps_key(const void *addr) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return -1;
  char line[512];
  int in = 0, key = -1;
  uintptr_t a = (uintptr_t)addr;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = a >= lo && a < hi;
      continue;
    }
    if (in && sscanf(line, "ProtectionKey: %d", &key) == 1) break;
  }
  fclose(f);
  return key;
}

/* ---- faults, each in a child process ---- */

typedef struct probe {
  const volatile uint8_t *addr;
  uint8_t value;
  int faulted;
  int code; /* si_code and si_pkey of the fault */
  int pkey;
} probe;

static void read_probe(void *arg) {
  probe *p = arg;
  p->value = *p->addr;
}

/* V8's heap is not inherited by a forked child: its pages are read in this
 * process, the fault caught and jumped out of (the read is this file's
 * code, not V8's, so nothing is left half done). */
static sigjmp_buf fault_jump;
static volatile sig_atomic_t fault_code, fault_pkey;

static void catch_segv(int sig, siginfo_t *info, void *context) {
  (void)sig, (void)context;
  fault_code = info->si_code;
  fault_pkey = (sig_atomic_t)info->si_pkey;
  siglongjmp(fault_jump, 1);
}

static void read_catching(void *arg) {
  probe *p = arg;
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = catch_segv;
  sa.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &sa, &old);
  if (sigsetjmp(fault_jump, 1) == 0) {
    p->value = *p->addr;
    p->faulted = 0;
  } else {
    p->faulted = 1;
    p->code = fault_code;
    p->pkey = fault_pkey;
  }
  sigaction(SIGSEGV, &old, NULL);
}

typedef struct fault_report {
  int died_of_segv;
  int have_event;
  char tenant[64];
  int pkey;
  char log[2048];
} fault_report;

/* Reads what the child sent on the supervisor link: one PROTO_EVENT. */
static void read_event(int fd, fault_report *r) {
  proto_decoder d;
  proto_decoder_init(&d, 1 << 16);
  uint8_t buf[4096];
  ssize_t n;
  proto_frame f;
  while ((n = read(fd, buf, sizeof buf)) > 0) {
    if (proto_decoder_feed(&d, buf, (size_t)n) != 0) break;
    if (proto_decoder_next(&d, &f) == 1 && f.type == PROTO_EVENT) {
      json_t *body = json_loadb((const char *)f.payload, f.length, 0, NULL);
      const char *event = json_string_value(json_object_get(body, "event"));
      const char *tenant = json_string_value(json_object_get(body, "tenant"));
      if (event && strcmp(event, "mpk_fault") == 0 && tenant) {
        r->have_event = 1;
        snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
        r->pkey = (int)json_integer_value(json_object_get(body, "pkey"));
      }
      json_decref(body);
      break;
    }
  }
  proto_decoder_free(&d);
}

/* Forks; the child installs the worker's fault handler and reads `addr`
 * inside `inside` (or outside every isolate when NULL). */
static void fault_in_child(iso_worker *inside, const void *addr, fault_report *r) {
  memset(r, 0, sizeof *r);
  r->pkey = -1;
  int link[2], errp[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, link) != 0 || pipe(errp) != 0) {
    perror("socketpair/pipe");
    return;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    close(link[0]);
    close(errp[0]);
    dup2(errp[1], STDERR_FILENO);
    json_decref(mpk_start(7, link[1]));
    probe p = {addr, 0, 0, 0, 0};
    if (inside)
      iso_worker_call_inside(inside, read_probe, &p);
    else
      read_probe(&p);
    _exit(0); /* the read went through */
  }
  close(link[1]);
  close(errp[1]);
  read_event(link[0], r);
  size_t len = 0;
  ssize_t n;
  while (len < sizeof r->log - 1 && (n = read(errp[0], r->log + len, sizeof r->log - 1 - len)) > 0)
    len += (size_t)n;
  r->log[len] = '\0';
  int status = 0;
  waitpid(pid, &status, 0);
  r->died_of_segv = WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV;
  close(link[0]);
  close(errp[0]);
}

static const char *probe_source =
    "globalThis.probe = new Uint8Array(8192).fill(0x5a);\n"
    "globalThis.thing = { answer: 42, list: [1, 2, 3] };\n"
    "export default { fetch() { return new Response(String(probe[100])); } };\n";

static void test_protection(void) {
  test_worker *a = worker_start("tenant-a", probe_source);
  test_worker *b = worker_start("tenant-b", probe_source);
  if (a == NULL || b == NULL) return;
  int ka = iso_worker_pkey(a->iso), kb = iso_worker_pkey(b->iso);
  check(ka > 0 && kb > 0 && ka != kb, "A and B have different keys (%d, %d)", ka, kb);
  const void *b_heap = iso_worker_address_of(b->iso, "thing");
  const void *b_buffer = iso_worker_address_of(b->iso, "probe");
  const void *a_buffer = iso_worker_address_of(a->iso, "probe");
  check(b_heap && b_buffer && a_buffer, "addresses of B's heap object and buffers");
  if (!b_heap || !b_buffer || !a_buffer) return;
  check(smaps_key(b_heap) == kb, "the kernel has B's heap page on key %d (smaps: %d)", kb,
        smaps_key(b_heap));
  check(smaps_key(b_buffer) == kb, "the kernel has B's ArrayBuffer page on key %d (smaps: %d)",
        kb, smaps_key(b_buffer));
  check(smaps_key(a_buffer) == ka, "the kernel has A's ArrayBuffer page on key %d (smaps: %d)",
        ka, smaps_key(a_buffer));

  probe p = {b_buffer, 0, 0, 0, 0};
  iso_worker_call_inside(b->iso, read_probe, &p);
  check(p.value == 0x5a, "with B entered, B's ArrayBuffer reads back (0x%02x)", p.value);
  p = (probe){b_heap, 0, 0, 0, 0};
  iso_worker_call_inside(b->iso, read_probe, &p);
  check(1, "with B entered, B's heap object reads");
  check(request(a, 1, "/", "90") && request(b, 1, "/", "90"), "both still serve requests");

  /* Requests ran since: the collector may have moved the objects. */
  b_heap = iso_worker_address_of(b->iso, "thing");
  const void *a_heap = iso_worker_address_of(a->iso, "thing");
  p = (probe){b_heap, 0, 0, 0, 0};
  iso_worker_call_inside(a->iso, read_catching, &p);
  check(p.faulted && p.code == SEGV_PKUERR && p.pkey == kb,
        "B's heap object, read while A is entered: SEGV_PKUERR on key %d (faulted %d, si_code %d, "
        "key %d)", kb, p.faulted, p.code, p.pkey);
  p = (probe){b_heap, 0, 0, 0, 0};
  read_catching(&p);
  check(p.faulted && p.code == SEGV_PKUERR && p.pkey == kb,
        "B's heap object, read outside every isolate: SEGV_PKUERR on key %d (faulted %d, "
        "si_code %d, key %d)", kb, p.faulted, p.code, p.pkey);
  p = (probe){a_heap, 0, 0, 0, 0};
  iso_worker_call_inside(a->iso, read_catching, &p);
  check(!p.faulted, "A's own heap object, read while A is entered: no fault");
  p = (probe){b_heap, 0, 0, 0, 0};
  iso_worker_call_inside(b->iso, read_catching, &p);
  check(!p.faulted, "B's heap object, read while B is entered: no fault");
  check(request(a, 2, "/", "90") && request(b, 2, "/", "90"), "both still serve requests");

  /* The whole fault path, as edgenode-worker takes it, in a child process. */
  static const struct {
    const char *what;
    int inside_a;
  } cases[] = {
      {"B's ArrayBuffer contents, read while A is entered", 1},
      {"B's ArrayBuffer contents, read outside every isolate", 0},
  };
  for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
    fault_report r;
    fault_in_child(cases[i].inside_a ? a->iso : NULL, b_buffer, &r);
    const char *tenant = cases[i].inside_a ? "tenant-a" : "";
    check(r.died_of_segv, "%s: the process dies of SIGSEGV", cases[i].what);
    check(r.have_event && r.pkey == kb && strcmp(r.tenant, tenant) == 0,
          "%s: PROTO_EVENT mpk_fault tenant \"%s\" pkey %d (got %s \"%s\" %d)", cases[i].what,
          tenant, kb, r.have_event ? "event" : "no event", r.tenant, r.pkey);
    char want[64];
    snprintf(want, sizeof want, "\"tenant\":\"%s\"", tenant);
    check(strstr(r.log, "memory protection key fault") && strstr(r.log, want) &&
              strstr(r.log, "\"process\":\"worker-7\""),
          "%s: the log line names the tenant", cases[i].what);
    if (r.log[0]) printf("  child log: %s", r.log);
  }
  worker_stop(a);
  worker_stop(b);
}

/* ---- real workers ---- */

static const char *gc_source =
    "export default { async fetch(request) {\n"
    "  let keep = [];\n"
    "  for (let round = 0; round < 8; round++) {\n"
    "    const junk = [];\n"
    "    for (let i = 0; i < 3000; i++) junk.push({ i, s: 'x' + i, a: [i, i + 1] });\n"
    "    const m = new Map(junk.map(o => [o.s, o]));\n"
    "    keep.push(JSON.parse(JSON.stringify(junk.slice(0, 10))));\n"
    "    for (const size of [1, 16, 17, 100, 1000, 2048, 2049, 5000, 70000, 300000]) {\n"
    "      const b = new Uint8Array(size); b[size - 1] = 7; if (b[size - 1] !== 7) throw 1;\n"
    "    }\n"
    "    if (m.size !== 3000) throw new Error('map');\n"
    "  }\n"
    "  const enc = new TextEncoder().encode('héllo'.repeat(500));\n"
    "  const rnd = crypto.getRandomValues(new Uint8Array(4096));\n"
    "  return new Response(keep.length + ':' + enc.length + ':' + rnd.length);\n"
    "} };\n";

static const char *async_source =
    "const wait = (ms, v) => new Promise(r => setTimeout(() => r(v), ms));\n"
    "let count = 0;\n"
    "export default { async fetch(request) {\n"
    "  const parts = await Promise.all([wait(30, 'a'), wait(10, 'b'), (async () => {\n"
    "    await null; return 'c'; })()]);\n"
    "  let t = 0; await new Promise(r => { const id = setInterval(() => {\n"
    "    if (++t === 3) { clearInterval(id); r(); } }, 5); });\n"
    "  const id = setTimeout(() => { throw new Error('cancelled timer ran'); }, 1);\n"
    "  clearTimeout(id);\n"
    "  return new Response(parts.join('') + t + ':' + (++count));\n"
    "} };\n";

/* A disposed isolate's heap pages are kept for the next one (isolate/pages.cc):
 * they must come with the new isolate's key, never the old one's. */
static void test_reused_pages(const char *expect) {
  test_worker *old = worker_start("tenant-old", probe_source);
  if (old == NULL) return;
  worker_stop(old);
  iso_page_stats before, after;
  iso_page_stats_get(&before);
  test_worker *w = worker_start("tenant-new", probe_source);
  if (w == NULL) return;
  iso_page_stats_get(&after);
  check(after.reused_regions > before.reused_regions,
        "a new isolate is made on heap pages kept from a disposed one (%llu of them)",
        (unsigned long long)(after.reused_regions - before.reused_regions));
  if (strcmp(expect, "on") == 0) {
    int key = iso_worker_pkey(w->iso);
    const void *heap = iso_worker_address_of(w->iso, "thing");
    check(heap != NULL && smaps_key(heap) == key,
          "the kernel has its heap page on its own key %d (smaps: %d)", key,
          heap ? smaps_key(heap) : -1);
  }
  check(request(w, 1, "/", "90"), "it answers from those pages");
  worker_stop(w);
}

/* An isolate the pool's thread made, with that thread's keys open only
 * while it made it, serves on this thread from pages of its own key. */
static void test_pool_thread(const char *expect) {
  if (iso_pool_fill(0) != 0 || iso_pool_start(1) != 0) {
    check(0, "the pool's thread starts");
    return;
  }
  /* Emulated, making an isolate takes seconds. */
  for (int i = 0; i < 12000 && iso_pool_size() < 1; i++) {
    struct timespec ts = {0, 10 * 1000000L};
    nanosleep(&ts, NULL);
  }
  check(iso_pool_size() == 1, "the pool's thread makes a blank isolate");
  iso_pool_start(0);
  test_worker *w = worker_start("tenant-pooled", probe_source);
  if (w != NULL) {
    check(iso_pool_size() == 0, "a worker takes it");
    if (strcmp(expect, "on") == 0) {
      int key = iso_worker_pkey(w->iso);
      const void *heap = iso_worker_address_of(w->iso, "thing");
      check(key > 0 && heap != NULL && smaps_key(heap) == key,
            "its heap page is on its own key %d (smaps: %d)", key, heap ? smaps_key(heap) : -1);
    }
    check(request(w, 1, "/", "90"), "it answers on this thread");
    worker_stop(w);
  }
  iso_pool_stop();
}

static const char *hello_source =
    "export default { fetch(request) { return new Response('hello ' + new URL(request.url)"
    ".hostname); } };\n";

#define N_WORKERS 20

static void test_workers(const char *expect) {
  test_worker *ws[N_WORKERS];
  int loaded_ok = 1, keys_ok = 1;
  int used[16] = {0};
  for (int i = 0; i < N_WORKERS; i++) {
    char name[32];
    snprintf(name, sizeof name, "w%d", i);
    const char *src = i % 3 == 0 ? gc_source : i % 3 == 1 ? async_source : hello_source;
    ws[i] = worker_start(name, src);
    if (ws[i] == NULL) {
      loaded_ok = 0;
      continue;
    }
    int k = iso_worker_pkey(ws[i]->iso);
    if (k < 0 || k > 15) keys_ok = 0;
    else used[k]++;
  }
  check(loaded_ok, "%d workers load", N_WORKERS);
  if (!loaded_ok) return;
  iso_mpk_status st;
  iso_mpk_status_get(&st);
  if (strcmp(expect, "off") == 0) {
    check(used[0] == N_WORKERS, "without MPK every isolate has key 0");
  } else {
    /* Spread: no key holds two isolates while another holds none. */
    int lo = N_WORKERS, hi = 0, distinct = 0;
    for (int k = 1; k < 16; k++) {
      if (used[k] == 0) continue;
      distinct++;
      if (used[k] < lo) lo = used[k];
      if (used[k] > hi) hi = used[k];
    }
    int spread = used[0] == 0 && hi - lo <= 1 && distinct >= (N_WORKERS < 14 ? N_WORKERS : 14) - 1;
    check(keys_ok && spread, "%d isolates spread over %d keys (fewest %d, most %d per key)",
          N_WORKERS, distinct, lo, hi);
  }
  int ok = 1;
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < N_WORKERS; i++) {
      char want[64];
      const char *w = NULL;
      if (i % 3 == 1) {
        snprintf(want, sizeof want, "abc3:%d", round + 1);
        w = want;
      } else if (i % 3 == 2) {
        snprintf(want, sizeof want, "hello w%d.localhost", i);
        w = want;
      } else {
        w = "8:3000:4096";
      }
      if (!request(ws[i], (uint64_t)(round + 1), "/", w)) ok = 0;
    }
  }
  check(ok, "requests, GC-heavy code, promises, timers and ArrayBuffers of every size answer "
            "right in %d isolates, 3 rounds", N_WORKERS);
  /* Dispose half and make new ones: keys go back and are handed out again. */
  for (int i = 0; i < N_WORKERS; i += 2) {
    iso_heap_stats hs;
    iso_worker_heap_stats(ws[i]->iso, &hs);
    if (hs.used_bytes == 0) ok = 0;
    worker_stop(ws[i]);
    ws[i] = worker_start("again", hello_source);
    if (ws[i] == NULL || !request(ws[i], 9, "/", "hello again.localhost")) ok = 0;
  }
  check(ok, "heap statistics, disposal and new isolates in their place");
  for (int i = 0; i < N_WORKERS; i++) worker_stop(ws[i]);
}

/* ---- figures for tests/bench/mpk.sh (no assertion on them) ---- */

static void noop(void *arg) { (void)arg; }

static double seconds(uint64_t ns) { return (double)ns / 1e9; }

/* CPU time of the whole process, V8's background threads included. */
static uint64_t process_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void bench(double budget_s) {
  test_worker *a = worker_start("bench-a", hello_source);
  test_worker *b = worker_start("bench-b", hello_source);
  test_worker *g = worker_start("bench-gc", gc_source);
  if (a == NULL || b == NULL || g == NULL) return;
  /* One switch: leave one isolate, enter the other (PKRU written twice
   * with MPK on, plus V8's own Isolate::Enter and Exit). */
  uint64_t n = 0, t0 = time_mono_ns(), until = t0 + (uint64_t)(budget_s * 1e9);
  while (time_mono_ns() < until) {
    for (int i = 0; i < 1000; i++) {
      iso_worker_call_inside(a->iso, noop, NULL);
      iso_worker_call_inside(b->iso, noop, NULL);
    }
    n += 2000;
  }
  printf("bench: isolate switch %.1f ns\n", (double)(time_mono_ns() - t0) / (double)n);
  /* Hello-world requests through the isolate API, alternating two tenants. */
  uint64_t token = 100;
  n = 0;
  uint64_t c0 = process_cpu_ns();
  t0 = time_mono_ns();
  until = t0 + (uint64_t)(budget_s * 1e9);
  while (time_mono_ns() < until) {
    for (int i = 0; i < 100; i++) {
      if (!request(a, token++, "/", NULL) || !request(b, token++, "/", NULL)) return;
    }
    n += 200;
  }
  printf("bench: hello requests %.0f /s, %.2f us CPU each\n",
         (double)n / seconds(time_mono_ns() - t0), (double)(process_cpu_ns() - c0) / 1e3 / n);
  n = 0;
  c0 = process_cpu_ns();
  t0 = time_mono_ns();
  until = t0 + (uint64_t)(budget_s * 1e9);
  while (time_mono_ns() < until) {
    if (!request(g, token++, "/", NULL)) return;
    n++;
  }
  printf("bench: gc-heavy requests %.2f /s, %.1f ms CPU each\n",
         (double)n / seconds(time_mono_ns() - t0), (double)(process_cpu_ns() - c0) / 1e6 / n);
  worker_stop(a);
  worker_stop(b);
  worker_stop(g);
}

/* A wasm Memory grown and written in a worker: its pages are the
 * worker's (on its key when MPK is on), and the worker serves after. */
static const char *wasm_source =
    "const mem = new WebAssembly.Memory({ initial: 1 });\n"
    "mem.grow(3);\n"
    "globalThis.wmem = new Uint8Array(mem.buffer);\n"
    "wmem.fill(0x77);\n"
    "export default { fetch() { return new Response(String(wmem[200000] + wmem.length)); } };\n";

static void test_wasm(const char *expect) {
  test_worker *w = worker_start("tenant-wasm", wasm_source);
  if (w == NULL) return;
  check(request(w, 1, "/", "262263"), "%s: a worker with a grown wasm Memory serves", expect);
  const void *page = iso_worker_address_of(w->iso, "wmem");
  check(page != NULL, "%s: the address of its Memory", expect);
  if (page != NULL && strcmp(expect, "on") == 0) {
    int key = iso_worker_pkey(w->iso);
    check(smaps_key(page) == key, "the kernel has the Memory's page on key %d (smaps: %d)", key,
          smaps_key(page));
  }
  worker_stop(w);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--bench") == 0) {
    /* mpk_test --bench on|off|dry SECONDS */
    if (strcmp(argv[2], "on") != 0) setenv("EDGENODE_MPK", argv[2], 1);
    setvbuf(stdout, NULL, _IOLBF, 0);
    log_init("mpk-bench", LOG_WARN);
    if (iso_platform_init() != 0) return 1;
    iso_mpk_status st;
    iso_mpk_status_get(&st);
    printf("bench: mpk %s, enabled %d, keys %d, single-threaded %d\n", argv[2], st.enabled,
           st.keys, st.single_threaded);
    bench(atof(argv[3]));
    iso_pool_fill(0);
    printf("MPK-TEST: PASS\n");
    return 0;
  }
  const char *expect = argc >= 3 && strcmp(argv[1], "--expect") == 0 ? argv[2] : NULL;
  int workers = !(argc == 4 && strcmp(argv[3], "--no-workers") == 0);
  if (expect == NULL || (strcmp(expect, "on") && strcmp(expect, "dry") && strcmp(expect, "off"))) {
    fprintf(stderr, "usage: mpk_test --expect on|dry|off [--no-workers]\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(expect, "dry") == 0) setenv("EDGENODE_MPK", "dry", 1);
  log_init("mpk-test", LOG_INFO);
  if (iso_platform_init() != 0) {
    check(0, "V8 starts");
    printf("MPK-TEST: FAIL\n");
    return 1;
  }
  iso_mpk_status st;
  iso_mpk_status_get(&st);
  printf("  mpk: enabled %d, keys %d, single-threaded %d, reason \"%s\"\n", st.enabled,
         st.keys, st.single_threaded, st.reason);
  if (strcmp(expect, "on") == 0) {
    check(st.enabled && st.keys >= 2 && st.single_threaded && st.reason[0] == '\0',
          "MPK is on with %d keys", st.keys);
    json_t *hello = mpk_start(7, -1);
    check(json_is_true(json_object_get(hello, "enabled")) &&
              json_integer_value(json_object_get(hello, "keys")) == st.keys,
          "PROTO_HELLO says {\"enabled\": true, \"keys\": %d}", st.keys);
    json_decref(hello);
    if (st.enabled) test_protection();
  } else {
    check(!st.enabled && st.keys == 0 && st.reason[0] != '\0', "MPK is off: %s", st.reason);
    check(st.single_threaded == (strcmp(expect, "dry") == 0), "--single-threaded only with MPK");
    json_t *hello = mpk_start(7, -1);
    check(json_is_false(json_object_get(hello, "enabled")) &&
              json_integer_value(json_object_get(hello, "keys")) == 0,
          "PROTO_HELLO says {\"enabled\": false, \"keys\": 0}");
    json_decref(hello);
    check(iso_worker_current() == NULL, "no current worker outside every isolate");
  }
  if (workers) test_workers(expect);
  test_wasm(expect);
  test_reused_pages(expect);
  test_pool_thread(expect);
  iso_pool_fill(0);
  printf("MPK-TEST: %s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
}

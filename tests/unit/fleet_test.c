/*
 * fleet against a real NATS JetStream cluster: three nats-server processes
 * on loopback ports, started and stopped by the test, as the fleet notes
 * measured them. Nothing is mocked; the servers' logs are kept in the test's
 * temporary directory and printed when a test fails.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <cmocka.h>
#include <nats/nats.h>

#include "fleet.h"

#define SERVERS 3

typedef struct cluster {
  char dir[256];
  int port[SERVERS];
  int cport[SERVERS];
  pid_t pid[SERVERS];
} cluster;

static cluster C;

/* A port below the kernel's ephemeral range (32768 and up by default), so
 * that no outgoing connection of the servers takes it between our check and
 * their bind. */
static int free_port(void) {
  static unsigned seed;
  if (seed == 0) seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int tries = 0; tries < 1000; tries++) {
    int port = 20000 + (int)(rand_r(&seed) % 12000);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (ok) return port;
  }
  fail_msg("no free port");
  return -1;
}

static void start_server(int i) {
  char name[16], port[16], cport[32], sd[300], routes[200], log[300];
  snprintf(name, sizeof name, "n%d", i);
  snprintf(port, sizeof port, "%d", C.port[i]);
  snprintf(cport, sizeof cport, "nats://127.0.0.1:%d", C.cport[i]);
  snprintf(sd, sizeof sd, "%s/js%d", C.dir, i);
  snprintf(log, sizeof log, "%s/n%d.log", C.dir, i);
  int n = 0;
  routes[0] = '\0';
  for (int j = 0; j < SERVERS; j++)
    if (j != i)
      n += snprintf(routes + n, sizeof routes - (size_t)n, "%snats-route://127.0.0.1:%d",
                    n ? "," : "", C.cport[j]);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    execlp("nats-server", "nats-server", "-n", name, "-a", "127.0.0.1", "-p", port, "-js", "-sd",
           sd, "--cluster_name", "edge", "-cluster", cport, "-routes", routes, (char *)NULL);
    /* Debian installs it in sbin, which a user's PATH may not hold. */
    execl("/usr/sbin/nats-server", "nats-server", "-n", name, "-a", "127.0.0.1", "-p", port, "-js",
          "-sd", sd, "--cluster_name", "edge", "-cluster", cport, "-routes", routes, (char *)NULL);
    fprintf(stderr, "cannot run nats-server: %s (deploy/setup.sh installs it)\n", strerror(errno));
    _exit(127);
  }
  C.pid[i] = pid;
}

static void stop_server(int i, int sig) {
  if (C.pid[i] <= 0) return;
  kill(C.pid[i], sig);
  waitpid(C.pid[i], NULL, 0);
  C.pid[i] = 0;
}

static void dump_logs(void) {
  for (int i = 0; i < SERVERS; i++) {
    char path[300], line[512];
    snprintf(path, sizeof path, "%s/n%d.log", C.dir, i);
    FILE *fp = fopen(path, "r");
    if (!fp) continue;
    fprintf(stderr, "---- nats-server n%d ----\n", i);
    while (fgets(line, sizeof line, fp)) fputs(line, stderr);
    fclose(fp);
  }
}

static int setup_cluster(void **state) {
  (void)state;
  snprintf(C.dir, sizeof C.dir, "%s/edgenode-fleet-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (mkdtemp(C.dir) == NULL) return -1;
  for (int i = 0; i < SERVERS; i++) {
    C.port[i] = free_port();
    C.cport[i] = free_port();
  }
  for (int i = 0; i < SERVERS; i++) start_server(i);
  return 0;
}

static int teardown_cluster(void **state) {
  (void)state;
  for (int i = 0; i < SERVERS; i++) stop_server(i, SIGTERM);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", C.dir);
  return system(cmd) == 0 ? 0 : -1;
}

static char *servers(void) {
  static char buf[256];
  int n = 0;
  for (int i = 0; i < SERVERS; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%snats://127.0.0.1:%d", i ? "," : "", C.port[i]);
  return buf;
}

/* ---- a node's view: callbacks record what arrived ---- */

typedef struct node_view {
  unsigned synced;
  int connected;
  char last_key[64];
  char last_value[256];
  uint64_t last_version;
  int changes;
  int deletes;
  /* values too large for last_value: checked against `expected` */
  const struct blob *expected;
  uint64_t big_version;
  int big_ok;
  int damaged;
  char damaged_keys[128];
  char damaged_why[256];
} node_view;

/* A value of len pseudo-random bytes, different for each seed. */
typedef struct blob {
  unsigned char *data;
  size_t len;
} blob;

static blob make_blob(size_t len, unsigned seed) {
  blob b = {.data = malloc(len), .len = len};
  assert_non_null(b.data);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    b.data[i] = (unsigned char)x;
  }
  return b;
}

static int blob_equal(const blob *b, const void *value, size_t len) {
  return value && len == b->len && memcmp(value, b->data, len) == 0;
}

static void on_change(void *arg, const fleet_entry *e) {
  node_view *v = arg;
  if (e->bucket != FLEET_WORKERS) return;
  v->changes++;
  if (e->len >= sizeof v->last_value) {
    v->big_version = e->version;
    v->big_ok = v->expected && blob_equal(v->expected, e->value, e->len);
  }
  if (e->deleted) v->deletes++;
  snprintf(v->last_key, sizeof v->last_key, "%s", e->key);
  snprintf(v->last_value, sizeof v->last_value, "%.*s", (int)e->len,
           e->value ? (const char *)e->value : "");
  v->last_version = e->version;
}

static void on_synced(void *arg, fleet_bucket b) {
  ((node_view *)arg)->synced |= 1u << b;
}

static void on_state(void *arg, int connected) {
  ((node_view *)arg)->connected = connected;
}

static void on_damaged(void *arg, fleet_bucket b, const char *key, uint64_t version,
                       const char *why) {
  node_view *v = arg;
  (void)b, (void)version;
  v->damaged++;
  size_t n = strlen(v->damaged_keys);
  snprintf(v->damaged_keys + n, sizeof v->damaged_keys - n, "%s%s", n ? "," : "", key);
  n = strlen(v->damaged_why);
  snprintf(v->damaged_why + n, sizeof v->damaged_why - n, "%s%s", n ? "|" : "", why);
}

static fleet *open_node(uv_loop_t *loop, const char *name, node_view *v, int64_t deadline_ms) {
  fleet_options o = {.servers = servers(), .node_name = name, .write_deadline_ms = deadline_ms};
  fleet_callbacks cb = {.change = on_change, .synced = on_synced, .state = on_state,
                        .damaged = on_damaged, .arg = v};
  fleet *f = NULL;
  char err[256];
  int rc = fleet_open(&f, loop, &o, &cb, err, sizeof err);
  if (rc != 0) fprintf(stderr, "fleet_open: %s\n", err);
  assert_int_equal(rc, 0);
  return f;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void tick(uv_timer_t *t) {
  (void)t;
}

/* Runs the loop until *flag is true or the time is up; returns *flag. */
static int run_until(uv_loop_t *loop, const int *flag, double seconds) {
  uv_timer_t t;
  uv_timer_init(loop, &t);
  uv_timer_start(&t, tick, 20, 20);
  double end = now_s() + seconds;
  while (!*flag && now_s() < end) uv_run(loop, UV_RUN_ONCE);
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(loop, UV_RUN_NOWAIT);
  return *flag;
}

static int all_synced(const node_view *v) {
  return v->synced == (1u << FLEET_BUCKETS) - 1;
}

static void wait_synced(uv_loop_t *loop, node_view *v) {
  double end = now_s() + 30;
  int done = 0;
  while (!done && now_s() < end) {
    done = all_synced(v);
    if (!done) run_until(loop, &done, 0.1);
  }
  if (!all_synced(v)) dump_logs();
  assert_true(all_synced(v));
}

/* Nodes "a" and "b", both synced. */
static void open_pair(uv_loop_t *loop, node_view *a, node_view *b, fleet **fa, fleet **fb) {
  *fa = open_node(loop, "a", a, 0);
  *fb = open_node(loop, "b", b, 0);
  wait_synced(loop, a);
  wait_synced(loop, b);
}

/* ---- writes: a counter, incremented by compare-and-set ---- */

static int increment(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev, void **out,
                     size_t *out_len, char **error) {
  (void)arg;
  (void)cur_rev;
  (void)error;
  long n = 0;
  if (cur) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.*s", (int)cur_len, (const char *)cur);
    n = strtol(buf, NULL, 10);
  }
  char *text = malloc(32);
  *out_len = (size_t)snprintf(text, 32, "%ld", n + 1);
  *out = text;
  return 0;
}

static int refuse(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev, void **out,
                  size_t *out_len, char **error) {
  (void)arg, (void)cur, (void)cur_len, (void)cur_rev, (void)out, (void)out_len;
  *error = strdup("not today");
  return -1;
}

typedef struct answer {
  int done;
  int status;
  uint64_t version;
  char error[128];
} answer;

static void on_done(void *arg, int status, uint64_t version, const char *error) {
  answer *a = arg;
  a->done = 1;
  a->status = status;
  a->version = version;
  snprintf(a->error, sizeof a->error, "%s", error ? error : "");
}

/* Closes the nodes, then runs the loop until their handles are gone. */
static void close_nodes(uv_loop_t *loop, fleet *a, fleet *b) {
  fleet_close(a);
  if (b) fleet_close(b);
  uv_run(loop, UV_RUN_DEFAULT);
}

static void test_write_is_watched_by_another_node(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  node_view a = {0}, b = {0};
  fleet *fa, *fb;
  open_pair(&loop, &a, &b, &fa, &fb);

  answer ans = {0};
  assert_int_equal(fleet_update(fa, FLEET_WORKERS, "hello", increment, NULL, on_done, &ans), 0);
  assert_true(run_until(&loop, &ans.done, 20));
  assert_int_equal(ans.status, 0);
  assert_int_equal(ans.version, 1);

  /* Node b learns of it from its watch, with the version a's write got. */
  double end = now_s() + 5;
  while (b.last_version != ans.version && now_s() < end) {
    int never = 0;
    run_until(&loop, &never, 0.05);
  }
  assert_int_equal(b.last_version, 1);
  assert_string_equal(b.last_key, "hello");
  assert_string_equal(b.last_value, "1");

  /* A deletion is the next version; deleting again finds nothing. */
  answer del = {0}, del2 = {0};
  assert_int_equal(fleet_delete(fb, FLEET_WORKERS, "hello", on_done, &del), 0);
  assert_true(run_until(&loop, &del.done, 20));
  assert_int_equal(del.status, 0);
  assert_int_equal(del.version, 2);
  end = now_s() + 5;
  while (a.deletes == 0 && now_s() < end) {
    int never = 0;
    run_until(&loop, &never, 0.05);
  }
  assert_int_equal(a.deletes, 1);
  assert_int_equal(a.last_version, 2);
  assert_int_equal(fleet_delete(fb, FLEET_WORKERS, "hello", on_done, &del2), 0);
  assert_true(run_until(&loop, &del2.done, 20));
  assert_int_equal(del2.status, FLEET_ENOENT);

  /* A write after a deletion starts from nothing, at the next version. */
  answer again = {0};
  assert_int_equal(fleet_update(fa, FLEET_WORKERS, "hello", increment, NULL, on_done, &again), 0);
  assert_true(run_until(&loop, &again.done, 20));
  assert_int_equal(again.status, 0);
  assert_int_equal(again.version, 3);

  /* Keys are subject tokens; members are not written this way. */
  assert_int_equal(fleet_update(fa, FLEET_WORKERS, "a.b", increment, NULL, on_done, &again), -EINVAL);
  assert_int_equal(fleet_update(fa, FLEET_MEMBERS, "a", increment, NULL, on_done, &again), -EINVAL);

  /* A transform that refuses writes nothing. */
  answer no = {0};
  assert_int_equal(fleet_update(fb, FLEET_WORKERS, "hello", refuse, NULL, on_done, &no), 0);
  assert_true(run_until(&loop, &no.done, 20));
  assert_int_equal(no.status, FLEET_EREJECT);
  assert_string_equal(no.error, "not today");

  fleet_status st;
  fleet_get_status(fa, &st);
  assert_true(st.connected);
  assert_true(st.bound);
  assert_true(st.writes_ok >= 1);

  close_nodes(&loop, fa, fb);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* 20 writes from two nodes, one key: versions 1 to 20, each increment
 * exactly once (KV compare-and-set loses some of them on this nats-server). */
static void test_concurrent_writes_serialize(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  node_view a = {0}, b = {0};
  fleet *fa, *fb;
  open_pair(&loop, &a, &b, &fa, &fb);
  enum { N = 20 };
  answer ans[N];
  memset(ans, 0, sizeof ans);
  for (int i = 0; i < N; i++)
    assert_int_equal(
        fleet_update(i % 2 ? fb : fa, FLEET_WORKERS, "counter", increment, NULL, on_done, &ans[i]),
        0);
  double end = now_s() + 60;
  int all = 0;
  while (!all && now_s() < end) {
    all = 1;
    for (int i = 0; i < N; i++) all &= ans[i].done;
    if (!all) run_until(&loop, &all, 0.05);
  }
  assert_true(all);
  for (int i = 0; i < N; i++) {
    assert_int_equal(ans[i].status, 0);
    assert_true(ans[i].version >= 1 && ans[i].version <= N);
    for (int j = 0; j < i; j++) assert_true(ans[i].version != ans[j].version);
  }
  end = now_s() + 5;
  while (strcmp(a.last_value, "20") != 0 && now_s() < end) {
    int never = 0;
    run_until(&loop, &never, 0.05);
  }
  assert_string_equal(a.last_key, "counter");
  assert_string_equal(a.last_value, "20");
  close_nodes(&loop, fa, fb);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* ---- values past NATS's max_payload: chunks ---- */

/* Writes a copy of the blob arg. */
static int put_blob(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev, void **out,
                    size_t *out_len, char **error) {
  (void)cur, (void)cur_len, (void)cur_rev, (void)error;
  const blob *b = arg;
  *out = malloc(b->len);
  memcpy(*out, b->data, b->len);
  *out_len = b->len;
  return 0;
}

/* Writes the next blob once the current value is the previous one whole. */
typedef struct blob_step {
  const blob *was, *next;
} blob_step;

static int cur_was_whole; /* set by step_blob on the write thread, read after its answer */

static int step_blob(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev, void **out,
                     size_t *out_len, char **error) {
  const blob_step *s = arg;
  cur_was_whole = blob_equal(s->was, cur, cur_len);
  return put_blob(s->next, cur, cur_len, cur_rev, out, out_len, error);
}

/* More than the fleet takes (the bytes are never touched: only the length). */
static int too_large(const void *arg, const void *cur, size_t cur_len, uint64_t cur_rev, void **out,
                     size_t *out_len, char **error) {
  (void)arg, (void)cur, (void)cur_len, (void)cur_rev, (void)error;
  *out_len = (size_t)FLEET_VALUE_MAX + 1;
  *out = malloc(*out_len);
  return 0;
}

static answer write_and_wait(uv_loop_t *loop, fleet *f, const char *key, fleet_transform_fn fn,
                             const void *arg) {
  answer a = {0};
  assert_int_equal(fleet_update(f, FLEET_WORKERS, key, fn, arg, on_done, &a), 0);
  assert_true(run_until(loop, &a.done, 60));
  return a;
}

static void wait_big(uv_loop_t *loop, node_view *v, uint64_t version) {
  double end = now_s() + 20;
  while (v->big_version != version && now_s() < end) {
    int never = 0;
    run_until(loop, &never, 0.05);
  }
  assert_int_equal(v->big_version, version);
}

/* A 5 MiB value (five times NATS's default max_payload) round-trips: the
 * other node's watch gets it whole, and the next write's transform reads
 * it back whole; a small value after it is a record again. */
static void test_large_values_go_in_chunks(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  node_view a = {0}, b = {0};
  fleet *fa, *fb;
  open_pair(&loop, &a, &b, &fa, &fb);

  blob v1 = make_blob(5u << 20, 1), v2 = make_blob((5u << 20) + 3, 2);
  b.expected = &v1;
  answer w1 = write_and_wait(&loop, fa, "big", put_blob, &v1);
  assert_int_equal(w1.status, 0);
  assert_int_equal(w1.version, 1);
  wait_big(&loop, &b, 1);
  assert_true(b.big_ok);

  b.expected = &v2;
  blob_step step = {.was = &v1, .next = &v2};
  answer w2 = write_and_wait(&loop, fb, "big", step_blob, &step);
  assert_int_equal(w2.status, 0);
  assert_int_equal(w2.version, 2);
  assert_true(cur_was_whole);
  wait_big(&loop, &b, 2);
  assert_true(b.big_ok);

  answer w3 = write_and_wait(&loop, fa, "big", increment, NULL);
  assert_int_equal(w3.status, 0);
  double end = now_s() + 5;
  while (b.last_version != 3 && now_s() < end) {
    int never = 0;
    run_until(&loop, &never, 0.05);
  }
  assert_string_equal(b.last_value, "1");

  answer no = write_and_wait(&loop, fa, "big", too_large, NULL);
  assert_int_equal(no.status, FLEET_EREJECT);
  assert_non_null(strstr(no.error, "over the fleet's limit"));

  fleet_status st;
  fleet_get_status(fa, &st);
  assert_int_equal(st.chunked_writes, 1);
  fleet_get_status(fb, &st);
  assert_int_equal(st.chunked_writes, 1);
  assert_int_equal(st.damaged, 0);
  assert_int_equal(a.damaged + b.damaged, 0);
  close_nodes(&loop, fa, fb);
  assert_int_equal(uv_loop_close(&loop), 0);
  free(v1.data);
  free(v2.data);
}

/* Tampering with the chunks stream from outside, as a disk or an operator
 * could: one chunk purged, one replaced by other bytes of the same length. */
static void tamper(const char *torn_key, const char *changed_key) {
  natsConnection *nc = NULL;
  jsCtx *js = NULL;
  assert_int_equal(natsConnection_ConnectTo(&nc, servers()), NATS_OK);
  assert_int_equal(natsConnection_JetStream(&js, nc, NULL), NATS_OK);
  char filter[128];
  jsErrCode je = 0;
  jsOptions o;
  jsOptions_Init(&o);
  snprintf(filter, sizeof filter, "chunk.workers.%s.1.*.2", torn_key);
  o.Stream.Purge.Subject = filter;
  assert_int_equal(js_PurgeStream(js, "EDGENODE_CHUNKS", &o, &je), NATS_OK);

  natsMsg *m = NULL;
  snprintf(filter, sizeof filter, "chunk.workers.%s.1.*.1", changed_key);
  assert_int_equal(js_GetLastMsg(&m, js, "EDGENODE_CHUNKS", filter, NULL, &je), NATS_OK);
  char subject[200];
  snprintf(subject, sizeof subject, "%s", natsMsg_GetSubject(m));
  int len = natsMsg_GetDataLength(m);
  char *bytes = malloc((size_t)len);
  memcpy(bytes, natsMsg_GetData(m), (size_t)len);
  bytes[len / 2] ^= 1;
  natsMsg_Destroy(m);
  jsOptions_Init(&o);
  o.Stream.Purge.Subject = subject;
  assert_int_equal(js_PurgeStream(js, "EDGENODE_CHUNKS", &o, &je), NATS_OK);
  jsPubAck *ack = NULL;
  assert_int_equal(js_Publish(&ack, js, subject, bytes, len, NULL, &je), NATS_OK);
  jsPubAck_Destroy(ack);
  free(bytes);
  jsCtx_Destroy(js);
  natsConnection_Destroy(nc);
}

/* A chunk missing or not matching the manifest's hash: the watch skips
 * the version and says so, a write over it is refused, a delete works. */
static void test_damaged_chunks_are_detected(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  node_view a = {0};
  fleet *fa = open_node(&loop, "a", &a, 0);
  wait_synced(&loop, &a);
  blob v = make_blob(3u << 20, 3);
  a.expected = &v;
  assert_int_equal(write_and_wait(&loop, fa, "torn", put_blob, &v).status, 0);
  assert_int_equal(write_and_wait(&loop, fa, "tampered", put_blob, &v).status, 0);
  wait_big(&loop, &a, 1);
  tamper("torn", "tampered");

  /* A node that syncs afterwards reads both back, and finds both damaged. */
  node_view c = {0};
  c.expected = &v;
  fleet *fc = open_node(&loop, "c", &c, 0);
  wait_synced(&loop, &c);
  double end = now_s() + 10;
  while (c.damaged < 2 && now_s() < end) {
    int never = 0;
    run_until(&loop, &never, 0.05);
  }
  assert_int_equal(c.damaged, 2);
  assert_string_equal(c.damaged_keys, "torn,tampered");
  /* 3 MiB in chunks of a little under 1 MiB (the default max_payload): 4 */
  assert_non_null(strstr(c.damaged_why, "chunk 3 of 4 is missing"));
  assert_non_null(strstr(c.damaged_why, "do not match the manifest's SHA-256"));
  assert_int_equal(c.big_version, 0); /* neither was delivered */
  fleet_status st;
  fleet_get_status(fc, &st);
  assert_int_equal(st.damaged, 2);

  answer torn = write_and_wait(&loop, fc, "torn", increment, NULL);
  assert_int_equal(torn.status, FLEET_EDAMAGED);
  assert_non_null(strstr(torn.error, "version 1 of the key cannot be read back"));
  assert_non_null(strstr(torn.error, "missing"));
  answer changed = write_and_wait(&loop, fc, "tampered", increment, NULL);
  assert_int_equal(changed.status, FLEET_EDAMAGED);
  assert_non_null(strstr(changed.error, "SHA-256"));

  answer del = {0};
  assert_int_equal(fleet_delete(fc, FLEET_WORKERS, "torn", on_done, &del), 0);
  assert_true(run_until(&loop, &del.done, 20));
  assert_int_equal(del.status, 0);
  assert_int_equal(del.version, 2);
  answer again = write_and_wait(&loop, fc, "torn", increment, NULL);
  assert_int_equal(again.status, 0);
  assert_int_equal(again.version, 3);

  close_nodes(&loop, fa, fc);
  assert_int_equal(uv_loop_close(&loop), 0);
  free(v.data);
}

/* One server of three down: writes go on (through an election if it led). */
static void test_one_server_down_writes_go_on(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  node_view a = {0};
  fleet *fa = open_node(&loop, "a", &a, 0);
  wait_synced(&loop, &a);
  stop_server(0, SIGKILL);
  for (int i = 0; i < 3; i++) {
    answer ans = {0};
    assert_int_equal(fleet_update(fa, FLEET_WORKERS, "survivor", increment, NULL, on_done, &ans), 0);
    assert_true(run_until(&loop, &ans.done, 30));
    if (ans.status != 0) dump_logs();
    assert_int_equal(ans.status, 0);
  }
  start_server(0);
  close_nodes(&loop, fa, NULL);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* Every server down: writes fail as unavailable, fast; the node learns it
 * is disconnected; once the servers are back it binds and syncs again. */
static void test_all_servers_down_then_back(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  node_view a = {0};
  fleet *fa = open_node(&loop, "a", &a, 0);
  wait_synced(&loop, &a);
  for (int i = 0; i < SERVERS; i++) stop_server(i, SIGKILL);
  int down = 0;
  double end = now_s() + 10;
  while (a.connected && now_s() < end) run_until(&loop, &down, 0.05);
  assert_false(a.connected);
  int never = 0;
  run_until(&loop, &never, 2.5); /* past the fail-fast threshold */

  answer ans = {0};
  double t0 = now_s();
  assert_int_equal(fleet_update(fa, FLEET_WORKERS, "offline", increment, NULL, on_done, &ans), 0);
  assert_true(run_until(&loop, &ans.done, 20));
  assert_int_equal(ans.status, FLEET_EUNAVAIL);
  assert_string_equal(ans.error, "fleet unavailable");
  assert_true(now_s() - t0 < 5);

  for (int i = 0; i < SERVERS; i++) start_server(i);
  end = now_s() + 30;
  while (!a.connected && now_s() < end) run_until(&loop, &never, 0.05);
  assert_true(a.connected);
  /* Writes work again once JetStream has its leaders back (seconds). */
  answer again = {0};
  end = now_s() + 40;
  do {
    memset(&again, 0, sizeof again);
    assert_int_equal(fleet_update(fa, FLEET_WORKERS, "offline", increment, NULL, on_done, &again), 0);
    assert_true(run_until(&loop, &again.done, 30));
    if (again.status != 0) run_until(&loop, &never, 0.5);
  } while (again.status != 0 && now_s() < end);
  if (again.status != 0) dump_logs();
  assert_int_equal(again.status, 0);
  close_nodes(&loop, fa, NULL);
  assert_int_equal(uv_loop_close(&loop), 0);
}

/* A node that starts while NATS is away opens at once and binds later. */
static void test_open_before_servers(void **state) {
  (void)state;
  for (int i = 0; i < SERVERS; i++) stop_server(i, SIGTERM);
  uv_loop_t loop;
  uv_loop_init(&loop);
  node_view a = {0};
  double t0 = now_s();
  fleet *fa = open_node(&loop, "late", &a, 0);
  assert_true(now_s() - t0 < 1);
  for (int i = 0; i < SERVERS; i++) start_server(i);
  wait_synced(&loop, &a);
  close_nodes(&loop, fa, NULL);
  assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_bad_options(void **state) {
  (void)state;
  uv_loop_t loop;
  uv_loop_init(&loop);
  fleet *f = (fleet *)1;
  char err[128];
  fleet_options o = {.servers = " , ", .node_name = "x"};
  assert_int_equal(fleet_open(&f, &loop, &o, NULL, err, sizeof err), -EINVAL);
  assert_null(f);
  assert_non_null(strstr(err, "no NATS server"));
  fleet_options nameless = {.servers = "nats://127.0.0.1:1"};
  assert_int_equal(fleet_open(&f, &loop, &nameless, NULL, err, sizeof err), -EINVAL);
  assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void) {
  signal(SIGPIPE, SIG_IGN);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_options),
      cmocka_unit_test(test_write_is_watched_by_another_node),
      cmocka_unit_test(test_concurrent_writes_serialize),
      cmocka_unit_test(test_large_values_go_in_chunks),
      cmocka_unit_test(test_damaged_chunks_are_detected),
      cmocka_unit_test(test_one_server_down_writes_go_on),
      cmocka_unit_test(test_all_servers_down_then_back),
      cmocka_unit_test(test_open_before_servers),
  };
  return cmocka_run_group_tests(tests, setup_cluster, teardown_cluster);
}

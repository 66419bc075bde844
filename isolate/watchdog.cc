/*
 * The CPU limit: one watchdog thread per process terminates an isolate whose
 * current entry into JavaScript has used more than its share of CPU time.
 *
 * The watchdog sleeps until the earliest wall-clock moment at which an armed
 * entry could have used up its CPU budget (CPU time never runs faster than
 * the wall clock), then reads that thread's CPU clock: time the thread spent
 * blocked in the kernel does not count, so it either terminates the isolate
 * or sleeps again for the remainder.
 *
 * Arming does not wake the watchdog when it already sleeps until an earlier
 * moment, and disarming never does: with a steady stream of short requests
 * it wakes about once per CPU limit, not once per request.
 *
 * Reading a thread's CPU clock is a real system call (about a microsecond
 * in a VM), too dear per request. Arming reuses a recent reading and assumes
 * the thread ran flat out since: the start it records is never earlier than
 * the true one, so the limit is never enforced early, and at most
 * `kStaleNs` late.
 *
 * Disarming says how much CPU the entry used, for per-request accounting,
 * and errs high rather than low: a short entry counts its wall time (the
 * thread could not have used more, short of being preempted), a longer one
 * reads the clock and counts the CPU since the reading its start was based
 * on, at most `kStaleNs` of which came before the entry.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

namespace iso {
namespace {

pthread_once_t once = PTHREAD_ONCE_INIT;
pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t cond;
watch *armed;                /* every armed watch */
uint64_t generations = 0;    /* arming counter: a late fire never hits a later entry */
uint64_t sleeping_until = 0; /* 0 while awake, UINT64_MAX while idle */

constexpr uint64_t kStaleNs = 1000000;
/* Entries shorter than this count their wall time instead of reading the clock. */
constexpr uint64_t kExactNs = 50000;

/* The arming thread's last reading of its own CPU clock. */
struct cpu_reading {
  bool valid;
  clockid_t clock;
  uint64_t cpu_ns;
  uint64_t wall_ns;
};
thread_local cpu_reading last_reading;

uint64_t clock_ns(clockid_t clock) {
  struct timespec ts;
  if (clock_gettime(clock, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Looks at every armed watch that is due; returns when to look next. */
uint64_t watchdog_scan(uint64_t now) {
  uint64_t next = UINT64_MAX;
  for (watch *wt = armed; wt != nullptr; wt = wt->next) {
    if (wt->fired == wt->generation)
      continue;
    if (now >= wt->wake_ns) {
      uint64_t cpu = clock_ns(wt->clock);
      uint64_t used = cpu > wt->cpu_start_ns ? cpu - wt->cpu_start_ns : 0;
      if (used >= wt->cpu_limit_ns) {
        wt->fired = wt->generation;
        /* Under the lock: the entry cannot disarm and start another meanwhile. */
        wt->isolate->TerminateExecution();
        continue;
      }
      wt->wake_ns = now + (wt->cpu_limit_ns - used);
    }
    if (wt->wake_ns < next)
      next = wt->wake_ns;
  }
  return next;
}

void *watchdog_main(void *) {
  /* Started from inside whichever isolate armed first: it needs no isolate's pages. */
  mpk_thread_close();
  pthread_mutex_lock(&mu);
  for (;;) {
    uint64_t next = watchdog_scan(clock_ns(CLOCK_MONOTONIC));
    sleeping_until = next;
    if (next == UINT64_MAX) {
      pthread_cond_wait(&cond, &mu);
    } else {
      struct timespec ts = {(time_t)(next / 1000000000u), (long)(next % 1000000000u)};
      int rc = pthread_cond_timedwait(&cond, &mu, &ts);
      if (rc != 0 && rc != ETIMEDOUT)
        abort();
    }
    sleeping_until = 0;
  }
  return nullptr;
}

void watchdog_start() {
  pthread_condattr_t attr;
  pthread_t thread;
  if (pthread_condattr_init(&attr) != 0 ||
      pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
      pthread_cond_init(&cond, &attr) != 0)
    abort();
  pthread_condattr_destroy(&attr);
  sleeping_until = UINT64_MAX;
  /* Without a watchdog there is no CPU limit: refusing to run is the only safe answer. */
  if (pthread_create(&thread, nullptr, watchdog_main, nullptr) != 0)
    abort();
  pthread_detach(thread);
}

/* An upper bound of this thread's CPU time now, without a system call when
 * the last reading is recent. *base is the reading it is based on. */
uint64_t cpu_now_upper(uint64_t now, uint64_t stale_ns, clockid_t *clock, uint64_t *base) {
  cpu_reading *r = &last_reading;
  if (!r->valid) {
    if (pthread_getcpuclockid(pthread_self(), &r->clock) != 0)
      abort();
    r->valid = true;
    r->wall_ns = 0;
  }
  *clock = r->clock;
  if (r->wall_ns == 0 || now - r->wall_ns > stale_ns) {
    r->cpu_ns = clock_ns(r->clock);
    r->wall_ns = now;
  }
  *base = r->cpu_ns;
  return r->cpu_ns + (now - r->wall_ns);
}

/* CPU used since `wt` was armed; see the comment at the top. */
uint64_t cpu_used(const watch *wt) {
  uint64_t now = clock_ns(CLOCK_MONOTONIC);
  uint64_t wall = now - wt->wall_start_ns;
  if (wall < kExactNs)
    return wall;
  cpu_reading *r = &last_reading;
  uint64_t cpu = clock_ns(wt->clock);
  if (r->valid && r->clock == wt->clock) {
    r->cpu_ns = cpu;
    r->wall_ns = now;
  }
  uint64_t since = cpu > wt->cpu_base_ns ? cpu - wt->cpu_base_ns : 0;
  return since < wall ? since : wall;
}

}  // namespace

void watchdog_arm(watch *wt, uint64_t cpu_limit_ns) {
  pthread_once(&once, watchdog_start);
  uint64_t now = clock_ns(CLOCK_MONOTONIC);
  uint64_t stale = cpu_limit_ns / 16 < kStaleNs ? cpu_limit_ns / 16 : kStaleNs;
  wt->cpu_start_ns = cpu_now_upper(now, stale, &wt->clock, &wt->cpu_base_ns);
  wt->wall_start_ns = now;
  wt->cpu_limit_ns = cpu_limit_ns;
  uint64_t wake = now + cpu_limit_ns;

  pthread_mutex_lock(&mu);
  wt->generation = ++generations;
  wt->fired = 0;
  wt->wake_ns = wake;
  wt->prev = nullptr;
  wt->next = armed;
  if (armed != nullptr)
    armed->prev = wt;
  armed = wt;
  bool wake_up = wake < sleeping_until;
  pthread_mutex_unlock(&mu);
  if (wake_up)
    pthread_cond_signal(&cond);
}

uint64_t watchdog_disarm(watch *wt, bool *fired_out) {
  uint64_t used = cpu_used(wt);
  pthread_mutex_lock(&mu);
  if (wt->prev != nullptr)
    wt->prev->next = wt->next;
  else
    armed = wt->next;
  if (wt->next != nullptr)
    wt->next->prev = wt->prev;
  wt->prev = wt->next = nullptr;
  *fired_out = wt->fired == wt->generation;
  pthread_mutex_unlock(&mu);
  return used;
}

uint64_t watchdog_used(const watch *wt) {
  return cpu_used(wt);
}

bool watchdog_fired(watch *wt) {
  pthread_mutex_lock(&mu);
  bool fired = wt->generation != 0 && wt->fired == wt->generation;
  pthread_mutex_unlock(&mu);
  return fired;
}

}  // namespace iso

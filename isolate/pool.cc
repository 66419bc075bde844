/*
 * The pool of blank workers: isolates with their context and runtime ready
 * and no tenant code, so that a cold start only loads the tenant's modules.
 *
 * One pool per process. A host fills it either on its own thread
 * (iso_pool_fill) or from a background thread (iso_pool_start): making a
 * blank isolate is the bulk of a cold start, and on the pool's thread it
 * runs on another core while the loop serves requests.
 *
 * V8 lets an isolate move between threads as long as only one uses it at a
 * time (Isolate::Enter records the thread that enters it), with one
 * exception: the isolate's stack limit is taken from the stack of the
 * thread that created it. A worker taken from the pool therefore gets the
 * taking thread's limit (pool_take).
 *
 * The same thread disposes of the workers the loop is done with
 * (pool_retire), first thing each time round: their heap pages are then
 * kept (pages.cc) just before the next blank isolate asks for pages. When it
 * has nothing else to do it also gives back the kept pages nobody took
 * (pool_trim): unmapping them one by one took a loop thread's time.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <vector>

#include "internal.h"

namespace iso {
namespace {

/* V8's default --stack-size on x64, in KiB: the room V8 gives JavaScript
 * below the point where the isolate's limit is set. */
constexpr uintptr_t kStackKib = 984;

/* The pool's thread gives way to the loop threads when cores are short:
 * a blank isolate made late only means the next cold start makes its own. */
constexpr int kMakerNice = 10;

/* After a failure to make an isolate, the pool's thread waits this long. */
constexpr auto kRetryAfter = std::chrono::seconds(1);

/* Retired workers waiting for the pool's thread: past either bound the
 * loop disposes of its own, so that a busy machine, where the thread of
 * lower priority falls behind, holds no more than this much in waiting
 * and a big heap goes at once. */
constexpr size_t kRetiredMax = 32;
constexpr size_t kRetiredBytesMax = 64u << 20;
constexpr size_t kRetiredOneMax = 8u << 20;

std::mutex mu;
std::condition_variable wanted; /* the pool is below its target, or the thread should stop */
std::vector<iso_worker *> ready;
struct retiree {
  iso_worker *w;
  size_t bytes; /* worker_held_bytes() when it was retired */
};
std::vector<retiree> retired;  /* waiting for the thread */
size_t retired_count = 0;       /* waiting or being disposed of */
size_t retired_bytes = 0;       /* of those, by worker_held_bytes() */
size_t target = 0;              /* what the pool's thread keeps ready */
bool trim_wanted = false;       /* kept heap pages to give back (pool_trim) */
uint64_t trim_age_ms = 0;
bool stopping = false;
bool maker_running = false;
pthread_t maker;

void *maker_main(void *) {
  /* Only the thread: nice values are per thread on Linux, and 0 is this
   * thread (the only one the sandbox lets it name, jail/seccomp.c). */
  if (setpriority(PRIO_PROCESS, 0, kMakerNice) != 0)
    log_debug("the isolate pool's thread keeps its priority: %s", strerror(errno));
  /* Like the watchdog, it holds no isolate's key between isolates. */
  mpk_thread_close();
  std::unique_lock<std::mutex> lock(mu);
  /* While blanks are wanted, one disposal per blank made: its pages go to
   * the next blank, and a cold start waiting for one matters more than
   * memory waiting to be given back. */
  bool disposed_since_blank = false;
  while (!stopping) {
    if (!retired.empty() && (ready.size() >= target || !disposed_since_blank)) {
      retiree r = retired.back();
      retired.pop_back();
      lock.unlock();
      worker_destroy(r.w);
      lock.lock();
      /* Counted until gone: the bounds are on what is not yet given back. */
      retired_count--;
      retired_bytes -= r.bytes;
      disposed_since_blank = true;
      continue;
    }
    if (ready.size() >= target) {
      if (trim_wanted) {
        trim_wanted = false;
        uint64_t age = trim_age_ms;
        lock.unlock();
        pages_trim(age);
        lock.lock();
        continue;
      }
      if (retired.empty() && !stopping)
        wanted.wait(lock);
      continue;
    }
    lock.unlock();
    iso_error err = {};
    iso_worker *w = worker_blank(kDefaultMemoryMb, &err);
    lock.lock();
    disposed_since_blank = false;
    if (w == nullptr) {
      log_error("could not make a blank isolate: %s", err.message ? err.message : "?");
      iso_error_clear(&err);
      wanted.wait_for(lock, kRetryAfter);
      continue;
    }
    ready.push_back(w);
  }
  return nullptr;
}


}  // namespace

/* The limit V8 would have set had this thread made the isolate. */
uintptr_t this_thread_stack_limit() {
  /* The frame, not a local's address: under AddressSanitizer a local may
   * live on a fake stack elsewhere. */
  return (uintptr_t)__builtin_frame_address(0) - kStackKib * 1024;
}

iso_worker *pool_take(uint32_t memory_mb) {
  if (memory_mb != kDefaultMemoryMb)
    return nullptr;
  iso_worker *w;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (ready.empty())
      return nullptr;
    w = ready.back();
    ready.pop_back();
    if (maker_running)
      wanted.notify_one();
  }
  mpk_scope inside(w);
  w->isolate->SetStackLimit(this_thread_stack_limit());
  return w;
}

/* With mu held: whether the thread takes one more worker holding `bytes`.
 * Short of blanks, it has its hands full: a loop that waits for a blank
 * would wait longer for it. */
bool retire_room(size_t bytes) {
  return maker_running && !stopping && ready.size() >= target && retired_count < kRetiredMax &&
         retired_bytes + bytes <= kRetiredBytesMax;
}

bool pool_trim(uint64_t older_than_ms) {
  std::lock_guard<std::mutex> lock(mu);
  if (!maker_running || stopping)
    return false;
  trim_age_ms = older_than_ms;
  trim_wanted = true;
  wanted.notify_one();
  return true;
}

bool pool_retire(iso_worker *w) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!retire_room(0))
      return false;
  }
  /* Read outside the lock: the statistics take a few microseconds. */
  size_t bytes = worker_held_bytes(w);
  if (bytes > kRetiredOneMax)
    return false;
  std::lock_guard<std::mutex> lock(mu);
  if (!retire_room(bytes))
    return false;
  retired.push_back({w, bytes});
  retired_count++;
  retired_bytes += bytes;
  wanted.notify_one();
  return true;
}

}  // namespace iso

using namespace iso;

size_t iso_pool_size(void) {
  std::lock_guard<std::mutex> lock(mu);
  return ready.size();
}

int iso_pool_fill(size_t want) {
  if (!platform_ready())
    return -1;
  {
    /* The pool's thread, if any, aims at the same number from now on. */
    std::lock_guard<std::mutex> lock(mu);
    target = want;
  }
  for (;;) {
    iso_worker *extra = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (ready.size() > want) {
        extra = ready.back();
        ready.pop_back();
      } else if (ready.size() == want) {
        return 0;
      }
    }
    if (extra != nullptr) {
      worker_destroy(extra);
      continue;
    }
    iso_error err = {};
    iso_worker *w = worker_blank(kDefaultMemoryMb, &err);
    if (w == nullptr) {
      log_error("could not make a blank isolate: %s", err.message ? err.message : "?");
      iso_error_clear(&err);
      return -1;
    }
    /* Made on this thread: its stack limit is already this thread's. */
    std::lock_guard<std::mutex> lock(mu);
    ready.push_back(w);
  }
}

int iso_pool_start(size_t keep_ready) {
  if (!platform_ready())
    return -1;
  std::lock_guard<std::mutex> lock(mu);
  target = keep_ready;
  if (maker_running) {
    wanted.notify_one();
    return 0;
  }
  if (keep_ready == 0)  /* nothing to keep: no thread */
    return 0;
  stopping = false;
  int rc = pthread_create(&maker, nullptr, maker_main, nullptr);
  if (rc != 0) {
    log_error("could not start the isolate pool's thread: %s", strerror(rc));
    return -1;
  }
  maker_running = true;
  return 0;
}

void iso_pool_stop(void) {
  bool was_running;
  pthread_t thread;
  {
    std::lock_guard<std::mutex> lock(mu);
    was_running = maker_running;
    thread = maker;
    maker_running = false;
    stopping = true;
    wanted.notify_one();
  }
  if (was_running) {
    int rc = pthread_join(thread, nullptr);
    if (rc != 0)
      log_error("could not join the isolate pool's thread: %s", strerror(rc));
  }
  /* What the thread had no time for before it stopped. */
  std::vector<retiree> left;
  {
    std::lock_guard<std::mutex> lock(mu);
    left.swap(retired);
    retired_count = 0;
    retired_bytes = 0;
  }
  for (const retiree &r : left)
    worker_destroy(r.w);
  if (iso_pool_fill(0) != 0)
    log_debug("could not empty the isolate pool");
}

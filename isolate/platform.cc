/*
 * Process-wide V8 set-up.
 */
#include <libplatform/libplatform.h>

#include <stdio.h>
#include <stdlib.h>

#include <memory>

#include "internal.h"

namespace {

/* A worker's foreground task runner: tasks go to the worker's own queue
 * (see iso::task_queue), which the worker runs from its entries. */
class worker_runner final : public v8::TaskRunner {
 public:
  explicit worker_runner(std::shared_ptr<iso::task_queue> queue) : queue_(std::move(queue)) {}

  void PostTask(std::unique_ptr<v8::Task> task) override { queue_->post(std::move(task), 0); }
  void PostNonNestableTask(std::unique_ptr<v8::Task> task) override {
    queue_->post(std::move(task), 0);
  }
  void PostDelayedTask(std::unique_ptr<v8::Task> task, double delay_s) override {
    queue_->post(std::move(task), delay_s);
  }
  void PostNonNestableDelayedTask(std::unique_ptr<v8::Task> task, double delay_s) override {
    queue_->post(std::move(task), delay_s);
  }
  /* Disabled below: V8 posts none. */
  void PostIdleTask(std::unique_ptr<v8::IdleTask>) override {}
  bool IdleTasksEnabled() override { return false; }
  /* Tasks never run nested: only from a worker's outermost entry. */
  bool NonNestableTasksEnabled() const override { return true; }
  bool NonNestableDelayedTasksEnabled() const override { return true; }

 private:
  std::shared_ptr<iso::task_queue> queue_;
};

/* V8's default platform, with edgenode's page allocator (pages kept between
 * isolates, tagged with their keys under MPK, wasm memories charged to
 * their workers) and, under MPK, background tasks let into every isolate's
 * pages. */
class edge_platform final : public v8::Platform {
 public:
  explicit edge_platform(std::unique_ptr<v8::Platform> inner)
      : inner_(std::move(inner)),
        pages_(iso::wasm_counted_pages(iso::mpk_keyed_pages(
            iso::pages_reusing(inner_->GetPageAllocator(), iso::mpk_active())))) {}

  v8::PageAllocator *GetPageAllocator() override { return pages_; }
  v8::ZoneBackingAllocator *GetZoneBackingAllocator() override {
    return inner_->GetZoneBackingAllocator();
  }
  void OnCriticalMemoryPressure() override { inner_->OnCriticalMemoryPressure(); }
  bool OnCriticalMemoryPressure(size_t length) override {
    return inner_->OnCriticalMemoryPressure(length);
  }
  int NumberOfWorkerThreads() override { return inner_->NumberOfWorkerThreads(); }
  /* A worker's isolate gets its own queue rather than the default
   * platform's, which is keyed by the isolate's address: a queue left there
   * by a disposed isolate would go to the next one made at that address. */
  std::shared_ptr<v8::TaskRunner> GetForegroundTaskRunner(v8::Isolate *isolate) override {
    auto *w = static_cast<iso_worker *>(isolate->GetData(iso::kIsolateWorkerSlot));
    if (w == nullptr)  /* the snapshot's isolate */
      return inner_->GetForegroundTaskRunner(isolate);
    return std::make_shared<worker_runner>(w->tasks);
  }
  void CallOnWorkerThread(std::unique_ptr<v8::Task> task) override {
    inner_->CallOnWorkerThread(iso::mpk_open_task(std::move(task)));
  }
  void CallBlockingTaskOnWorkerThread(std::unique_ptr<v8::Task> task) override {
    inner_->CallBlockingTaskOnWorkerThread(iso::mpk_open_task(std::move(task)));
  }
  void CallLowPriorityTaskOnWorkerThread(std::unique_ptr<v8::Task> task) override {
    inner_->CallLowPriorityTaskOnWorkerThread(iso::mpk_open_task(std::move(task)));
  }
  void CallDelayedOnWorkerThread(std::unique_ptr<v8::Task> task, double delay_s) override {
    inner_->CallDelayedOnWorkerThread(iso::mpk_open_task(std::move(task)), delay_s);
  }
  bool IdleTasksEnabled(v8::Isolate *isolate) override { return inner_->IdleTasksEnabled(isolate); }
  std::unique_ptr<v8::JobHandle> PostJob(v8::TaskPriority priority,
                                         std::unique_ptr<v8::JobTask> job) override {
    return inner_->PostJob(priority, iso::mpk_open_job(std::move(job)));
  }
  double MonotonicallyIncreasingTime() override { return inner_->MonotonicallyIncreasingTime(); }
  double CurrentClockTimeMillis() override { return inner_->CurrentClockTimeMillis(); }
  StackTracePrinter GetStackTracePrinter() override { return inner_->GetStackTracePrinter(); }
  v8::TracingController *GetTracingController() override {
    return inner_->GetTracingController();
  }
  void DumpWithoutCrashing() override { inner_->DumpWithoutCrashing(); }
  v8::HighAllocationThroughputObserver *GetHighAllocationThroughputObserver() override {
    return inner_->GetHighAllocationThroughputObserver();
  }

 private:
  std::unique_ptr<v8::Platform> inner_;
  v8::PageAllocator *pages_;
};

std::unique_ptr<v8::Platform> platform;

/* Rehashing every table of the snapshot in each new isolate is a tenth of
 * what making an isolate costs. The read-only heap, where V8 keeps the hash
 * seed, is shared by every isolate of the process anyway: so the seed is
 * drawn once per process, before the snapshot is made, and the isolates
 * made from it keep its tables as they are. */
bool fix_hash_seed() {
  char hex[17];
  if (random_hex(hex, 8) != 0) {
    log_error("no random bytes for V8's hash seed");
    return false;
  }
  /* Nonzero (zero asks V8 for a random seed per isolate), and below 2^63,
   * which is as far as V8's flag parser reads. */
  uint64_t seed = (strtoull(hex, nullptr, 16) >> 2) | 1;
  char flag[64];
  snprintf(flag, sizeof flag, "--hash-seed=%llu", (unsigned long long)seed);
  v8::V8::SetFlagsFromString(flag);
  v8::V8::SetFlagsFromString("--no-rehash-snapshot");
  return true;
}

/* V8 seeds each isolate's random numbers (Math.random, address hints) from
 * here; without a source it opens /dev/urandom through stdio once per
 * isolate, four system calls where one does. */
bool entropy(unsigned char *buffer, size_t length) {
  return random_bytes(buffer, length) == 0;
}

}  // namespace

namespace iso {

bool platform_ready() {
  return platform != nullptr && snapshot_blob()->data != nullptr;
}

double platform_now() {
  return platform->MonotonicallyIncreasingTime();
}

void task_queue::post(std::unique_ptr<v8::Task> task, double delay_s) {
  double due = delay_s > 0 ? platform_now() + delay_s : 0;
  std::lock_guard<std::mutex> lock(mu_);
  tasks_.push_back({due, std::move(task)});
  queued.store(tasks_.size(), std::memory_order_relaxed);
}

std::unique_ptr<v8::Task> task_queue::take_due() {
  double now = platform_now();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
    if (it->due <= now) {
      std::unique_ptr<v8::Task> task = std::move(it->task);
      tasks_.erase(it);
      queued.store(tasks_.size(), std::memory_order_relaxed);
      return task;
    }
  }
  return nullptr;
}

void task_queue::clear() {
  std::deque<queued_task> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    dropped.swap(tasks_);
    queued.store(0, std::memory_order_relaxed);
  }
}

}  // namespace iso

int iso_platform_init(void) {
  if (platform != nullptr)
    return iso::platform_ready() ? 0 : -1;
  /* Each worker process runs one loop per core: one background thread for
   * V8's compilers and GC is its fair share. */
  iso::mpk_init_before_v8();
  std::unique_ptr<v8::Platform> v8_default = v8::platform::NewDefaultPlatform(1);
  if (v8_default == nullptr)
    return -1;
  platform = std::make_unique<edge_platform>(std::move(v8_default));
  v8::V8::InitializePlatform(platform.get());
  v8::V8::SetEntropySource(entropy);
  /* The snapshot is made by this process and never leaves it: checksumming
   * it again on every Isolate::New would cost a pass over the whole blob. */
  v8::V8::SetFlagsFromString("--no-verify-snapshot-checksum");
  /* Interpreted and baseline code looks at a termination only when a
   * function's interrupt budget (bytecode bytes executed) runs out, and a
   * loop around a slow builtin spends little budget per turn: with V8's
   * 132 KB, `for (;;) JSON.parse(big)` ran 40 s past the CPU limit. A
   * budget 16 times smaller looks 16 times as often; the tier-up
   * thresholds, counted in budget ticks, are scaled to match so that code
   * is optimized when it was before. */
  v8::V8::SetFlagsFromString("--interrupt-budget=8192");
  v8::V8::SetFlagsFromString("--ticks-before-optimization=50");
  v8::V8::SetFlagsFromString("--bytecode-size-allowance-per-tick=67");
  if (!fix_hash_seed())
    return -1;
  /* libnode uses the system's ICU, whose data is linked in: no data file to find. */
  if (!v8::V8::InitializeICU())
    log_warn("V8 could not initialise ICU: Intl may not work");
  if (!v8::V8::Initialize())
    return -1;
  iso::mpk_init_after_v8();
  /* The runtime is evaluated once here, not once per worker. */
  uint64_t t0 = time_mono_ns();
  std::string error;
  if (!iso::snapshot_build(&error)) {
    log_error("could not make the runtime's snapshot: %s", error.c_str());
    return -1;
  }
  log_debug("runtime snapshot: %d bytes in %.1f ms", iso::snapshot_blob()->raw_size,
            (double)(time_mono_ns() - t0) / 1e6);
  iso::mpk_pin_shared_heap();
  return 0;
}

const char *iso_v8_version(void) {
  return v8::V8::GetVersion();
}

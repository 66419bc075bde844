/*
 * Entering JavaScript. Every entry into a worker's JavaScript goes through
 * run(): it arms the CPU watchdog, calls into the runtime, runs the microtask
 * checkpoint and V8's queued tasks, charges the CPU time to the request it
 * was made for, and afterwards turns a termination (CPU or heap limit) into
 * failures of the requests concerned.
 *
 * Also the memory limit's side of that: the heap check made after entries
 * and before a response leaves, V8's near-heap-limit callback, and the guard
 * that turns V8 running out of memory into the loss of one worker rather
 * than of the process.
 */
#include <setjmp.h>
#include <string.h>

#include "internal.h"

namespace iso {

__thread oom_guard *oom_top;

namespace {

/* Ends a request the runtime can no longer finish. */
void request_fail(iso_worker *w, uint64_t token, iso_error_kind kind, const char *message) {
  iso_error err = {};
  error_set(&err, kind, message);
  request_respond(w, token, nullptr, &err);
  iso_error_clear(&err);
  request_done(w, token);
}

}  // namespace

void fail_all(iso_worker *w, iso_error_kind kind, const char *message) {
  while (!w->pending.empty() && !w->free_requested)
    request_fail(w, w->pending.back().token, kind, message);
}

namespace {

/* Tasks a cleanup callback posts run at a later entry, not in a loop here. */
constexpr int kForegroundTasksPerEntry = 8;

/* The CPU limit is per request, over every entry made for it: what is left
 * of `token`'s. A token that is no running request (the load, code that
 * outlived its request) gets a whole limit for each entry. */
uint64_t cpu_budget(iso_worker *w, uint64_t token) {
  pending_request *p = pending_find(w, token);
  if (p == nullptr)
    return w->cpu_limit_ns;
  return p->cpu_ns < w->cpu_limit_ns ? w->cpu_limit_ns - p->cpu_ns : 0;
}

}  // namespace

/* A host callback may call back into this worker: nested entries share the
 * outer one's CPU budget, accounting and checkpoint. */
void entry_begin(iso_worker *w, entry *e, uint64_t token, uint64_t cpu_limit_ns) {
  e->saved_token = w->token;
  e->outer = w->depth++ == 0;
  w->token = token;
  if (e->outer) {
    w->heap_hit = false;
    w->charged = token;
    w->charged_reported_ns = 0;
    watchdog_arm(&w->watch, cpu_limit_ns);
  }
}

namespace {

/* Charges the outermost entry's CPU to its request, or, when it was made
 * for no running request (the load, code that outlived its request), to
 * the worker: what ran after its request was done is the part not reported
 * with it. */
void charge_entry(iso_worker *w, uint64_t used) {
  pending_request *p = pending_find(w, w->charged);
  if (p != nullptr)
    p->cpu_ns += used;
  else
    w->outside_cpu_ns += used > w->charged_reported_ns ? used - w->charged_reported_ns : 0;
}

}  // namespace

/* Returns why JavaScript was cut short: ISO_OK, ISO_ERR_CPU or ISO_ERR_MEMORY. */
iso_error_kind entry_end(iso_worker *w, entry *e) {
  iso_error_kind why = ISO_OK;
  if (e->outer) {
    /* Its verdict is read below, as heap_hit, with V8's own. */
    (void)heap_check(w);
    bool fired;
    charge_entry(w, watchdog_disarm(&w->watch, &fired));
    /* A termination that arrived after JavaScript returned would hit the
     * next entry instead: always clear it. */
    w->isolate->CancelTerminateExecution();
    if (w->heap_hit)
      why = ISO_ERR_MEMORY;
    else if (fired)
      why = ISO_ERR_CPU;
    /* Stopped inside the interpreter, Python's state is whatever it was
     * mid-instruction: the worker is replaced, as after the memory limit. */
    if (why == ISO_ERR_CPU && w->python)
      w->broken = true;
  }
  w->depth--;
  w->token = e->saved_token;
  return why;
}

namespace {

/* Whether the current entry was cut short: JavaScript must not run again
 * in it, even where V8 has already forgotten the termination. */
bool entry_stopped(iso_worker *w) {
  return w->heap_hit || w->isolate->IsExecutionTerminating() || watchdog_fired(&w->watch);
}

/* V8's own work for the isolate that it queued while JavaScript ran (the
 * callbacks of a FinalizationRegistry whose targets were collected), run in
 * the same entry: its CPU time counts as the entry's. False when a
 * microtask checkpoint was cut short, which loses what was queued. */
bool run_foreground_tasks(iso_worker *w) {
  for (int i = 0; i < kForegroundTasksPerEntry; i++) {
    if (w->tasks->queued.load(std::memory_order_relaxed) == 0 || entry_stopped(w))
      return true;
    w->running_task = w->tasks->take_due();
    if (w->running_task == nullptr)
      return true;
    entry_token_forget(w);
    w->running_task->Run();
    w->running_task.reset();
    if (entry_stopped(w))
      return true;
    w->isolate->PerformMicrotaskCheckpoint();
    if (entry_stopped(w))
      return false;
  }
  return true;
}

/* Enters JavaScript on behalf of `token`: `call` (which returns false when
 * it threw), then the microtasks, then V8's tasks. */
template <typename F>
void run(iso_worker *w, v8::Local<v8::Context> context, uint64_t token, F &&call) {
  v8::Isolate *isolate = w->isolate;
  uint64_t budget = cpu_budget(w, token);
  if (budget == 0 && w->depth == 0) {
    request_fail(w, token, ISO_ERR_CPU, "exceeded CPU limit");
    return;
  }
  entry e;
  entry_begin(w, &e, token, budget);
  context->SetContinuationPreservedEmbedderData(v8::Number::New(isolate, (double)token));
  w->entry_token = token;
  w->entry_token_valid = token < kMaxSafeToken;
  uint64_t blamed;
  bool queue_lost = false;
  {
    v8::TryCatch tc(isolate);
    if (!call() && tc.HasCaught() && !tc.HasTerminated()) {
      /* The runtime reports the tenant's errors itself: this is its own. */
      iso_error err = {};
      error_from_try_catch(w, context, ISO_ERR_EXCEPTION, tc, &err);
      request_respond(w, token, nullptr, &err);
      iso_error_clear(&err);
      request_done(w, token);
    }
    /* After a termination in the call the queued microtasks stay for the
     * next entry; a termination inside the checkpoint discards them all. */
    if (e.outer && !tc.HasTerminated()) {
      entry_token_forget(w);
      isolate->PerformMicrotaskCheckpoint();
      queue_lost = tc.HasTerminated();
      if (!queue_lost)
        queue_lost = !run_foreground_tasks(w);
    }
    blamed = running_token(w, context);
  }
  entry_token_forget(w);
  if (e.outer)
    context->SetContinuationPreservedEmbedderData(v8::Undefined(isolate));
  iso_error_kind why = entry_end(w, &e);
  switch (why) {
  case ISO_ERR_CPU: {
    /* Code that outlived its request, or its response (ctx.waitUntil): no
     * response carries the hit, so the worker counts it. */
    pending_request *p = blamed != 0 ? pending_find(w, blamed) : nullptr;
    if (blamed != 0 && (p == nullptr || p->responded))
      w->outside_cpu_limit_hits++;
    request_fail(w, blamed, ISO_ERR_CPU, "exceeded CPU limit");
    /* V8 drops every queued continuation when it stops the microtasks, and
     * which requests had one there is not known: none could finish. */
    if (queue_lost)
      fail_all(w, ISO_ERR_CANCELLED, "another request on this worker exceeded the CPU limit");
    break;
  }
  case ISO_ERR_MEMORY:
    fail_all(w, ISO_ERR_MEMORY, "exceeded memory limit");
    break;
  default:
    break;
  }
  if (e.outer && w->host.yielded != nullptr && !w->free_requested)
    w->host.yielded(w->host.data, why != ISO_OK);
}

}  // namespace

/* Calls a runtime function on behalf of `token`, then the microtasks. */
void run_function(iso_worker *w, v8::Local<v8::Context> context, uint64_t token,
                  const v8::Global<v8::Function> &fn, int argc, v8::Local<v8::Value> argv[]) {
  v8::Isolate *isolate = w->isolate;
  run(w, context, token, [&]() {
    return !fn.Get(isolate)->Call(context, v8::Undefined(isolate), argc, argv).IsEmpty();
  });
}

/* Settles async host call `call_id` on behalf of `token`, then the microtasks. */
void run_settle(iso_worker *w, v8::Local<v8::Context> context, uint64_t token, uint32_t call_id,
                int ok, const uint8_t *value, size_t value_len) {
  run(w, context, token,
      [&]() { return hostcall_settle(w, context, call_id, ok != 0, value, value_len); });
}

void run_call(iso_worker *w, v8::Local<v8::Context> context, uint64_t token,
              bool (*call)(void *arg), void *arg) {
  run(w, context, token, [&]() { return call(arg); });
}

/* V8 enforces the heap limit only when it collects garbage, and one builtin
 * (Array.from of a huge array-like, from warm code) can grow the heap far
 * past it with no collection in between, even to the end of the request.
 * So, when some heap grew since the last look, the heap is measured before
 * a response leaves and after every entry: over the limit, the worker has
 * hit it. */
bool heap_check(iso_worker *w) {
  if (w->heap_hit)
    return false;
  uint64_t growths = pages_heap_growths();
  if (growths == w->growths_seen)
    return true;
  w->growths_seen = growths;
  v8::HeapStatistics hs;
  w->isolate->GetHeapStatistics(&hs);
  if (hs.used_heap_size() <= hs.heap_size_limit())
    return true;
  memory_limit_hit(w);
  return false;
}

void memory_limit_hit(iso_worker *w) {
  w->broken = true;
  w->heap_hit = true;
  w->isolate->TerminateExecution();
}

size_t near_heap_limit(void *data, size_t current_limit, size_t) {
  iso_worker *w = static_cast<iso_worker *>(data);
  /* Called again in the same entry: a builtin is growing the heap in C++,
   * where the termination is never looked at. Refusing makes V8 give up,
   * which the worker's guard turns into this worker's failure. */
  if (w->heap_hit && w->oom != nullptr)
    return current_limit;
  w->broken = true;
  w->heap_hit = true;
  w->isolate->TerminateExecution();
  /* Returning the same limit here makes V8 give up at once: give it room to
   * unwind; the worker is discarded afterwards. */
  return current_limit + (32u << 20);
}

/* ---- V8 out of memory: the worker's loss, not the process's ----
 *
 * V8 gives up when one allocation does not fit under the heap limit even
 * after the callback above (Array.prototype.fill growing a dictionary, a
 * builtin that never looks at the termination): it calls the OOM handler,
 * and aborts the process if that returns. The handler instead jumps back to
 * the outermost call into the worker that was running, past V8's frames and
 * the shim's scopes in between. That isolate never runs JavaScript again:
 * its requests fail with the memory limit and it is disposed (its heap is
 * whole: the allocation that failed is all that did not happen). */

void oom_handler(const char *location, bool) {
  /* Only the innermost guard: jumping to an outer one would also skip
   * another worker's frames, which nothing would then undo. */
  if (oom_top != nullptr && oom_top->w->isolate == v8::Isolate::GetCurrent()) {
    log_warn("V8 ran out of memory in a worker (%s): it is discarded", location);
    siglongjmp(oom_top->jmp, 1);
  }
  log_error("V8 ran out of memory outside a worker's call (%s): the process ends", location);
}

/* After the jump: what the skipped frames would have undone. */
void oom_recover(iso_worker *w) {
  w->running_task.reset();
  bool fired;
  charge_entry(w, watchdog_disarm(&w->watch, &fired));
  while (v8::Isolate::GetCurrent() == w->isolate)
    w->isolate->Exit();
  w->depth = 0;
  w->token = 0;
  w->broken = true;
  w->heap_hit = true;
  fail_all(w, ISO_ERR_MEMORY, "exceeded memory limit");
}

}  // namespace iso

/*
 * What an isolate costs in this V8 before edgenode adds anything: V8's own
 * snapshot, no runtime, no embedder data. tests/bench/isolate-costs.sh runs
 * it beside edgenode's isolate costs, so that each figure of ours can be
 * read against the floor V8 sets.
 *
 * Prints, per isolate: CPU time of Isolate::New, of Context::New and of
 * Dispose (means), and the resident memory that stays per
 * isolate with a context that has run one script.
 */
#include <stdio.h>

#include <libplatform/libplatform.h>
#include <v8.h>

#include <memory>
#include <vector>

extern "C" {
#include "base.h"
}

namespace {

double thread_cpu_ms() {
  return (double)time_thread_cpu_ns() / 1e6;
}

/* An isolate with a context that has run a script, as a worker's would. */
bool run_once(v8::Isolate *isolate, std::vector<v8::Global<v8::Context>> *keep) {
  v8::Isolate::Scope isolate_scope(isolate);
  v8::HandleScope handles(isolate);
  v8::Local<v8::Context> context = v8::Context::New(isolate);
  v8::Context::Scope context_scope(context);
  v8::Local<v8::Script> script;
  v8::Local<v8::Value> result;
  if (!v8::Script::Compile(context, v8::String::NewFromUtf8Literal(isolate, "'hi' + 1"))
           .ToLocal(&script) ||
      !script->Run(context).ToLocal(&result))
    return false;
  if (keep != nullptr)
    keep->emplace_back(isolate, context);
  return true;
}

}  // namespace

int main() {
  enum { kResident = 200 };
  std::unique_ptr<v8::Platform> platform = v8::platform::NewDefaultPlatform(1);
  v8::V8::InitializePlatform(platform.get());
  v8::V8::Initialize();
  std::unique_ptr<v8::ArrayBuffer::Allocator> buffers(
      v8::ArrayBuffer::Allocator::NewDefaultAllocator());
  v8::Isolate::CreateParams params;
  params.array_buffer_allocator = buffers.get();
  /* As in a worker process, another isolate is always alive. */
  v8::Isolate *resident_one = v8::Isolate::New(params);

  /* Averages, as edgenode's own cost printout gives them. */
  enum { kCreates = 200 };
  double t_new = 0, t_context = 0, t_dispose = 0;
  for (int i = 0; i < kCreates; i++) {
    double c0 = thread_cpu_ms();
    v8::Isolate *isolate = v8::Isolate::New(params);
    double c1 = thread_cpu_ms();
    if (!run_once(isolate, nullptr)) {
      fprintf(stderr, "bare_v8: a script failed to run\n");
      return 1;
    }
    double c2 = thread_cpu_ms();
    isolate->Dispose();
    double c3 = thread_cpu_ms();
    t_new += c1 - c0;
    t_context += c2 - c1;
    t_dispose += c3 - c2;
  }
  printf("bare V8: Isolate::New %.3f ms cpu, context and one script %.3f ms cpu, Dispose %.3f "
         "ms cpu (mean of %d)\n",
         t_new / kCreates, t_context / kCreates, t_dispose / kCreates, kCreates);

  std::vector<v8::Isolate *> isolates;
  std::vector<v8::Global<v8::Context>> contexts;
  uint64_t before = process_rss_bytes(0);
  for (int i = 0; i < kResident; i++) {
    v8::Isolate *isolate = v8::Isolate::New(params);
    if (!run_once(isolate, &contexts))
      return 1;
    isolates.push_back(isolate);
  }
  printf("bare V8: an idle isolate with one context: %llu KiB resident\n",
         (unsigned long long)((process_rss_bytes(0) - before) / 1024 / kResident));
  for (auto &c : contexts)
    c.Reset();
  for (v8::Isolate *isolate : isolates)
    isolate->Dispose();
  resident_one->Dispose();
  return 0;
}

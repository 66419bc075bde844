/*
 * Process-wide V8 set-up.
 */
#include <libplatform/libplatform.h>

#include <memory>

#include "internal.h"

namespace {

std::unique_ptr<v8::Platform> platform;

}  // namespace

namespace iso {

bool platform_ready() {
  return platform != nullptr && snapshot_blob()->data != nullptr;
}

}  // namespace iso

int iso_platform_init(void) {
  if (platform != nullptr)
    return iso::platform_ready() ? 0 : -1;
  /* Each worker process runs one loop per core: one background thread for
   * V8's compilers and GC is its fair share. */
  iso::mpk_init_before_v8();
  platform = iso::mpk_wrap_platform(v8::platform::NewDefaultPlatform(1));
  if (platform == nullptr)
    return -1;
  v8::V8::InitializePlatform(platform.get());
  /* The snapshot is made by this process and never leaves it: checksumming
   * it again on every Isolate::New would cost a pass over the whole blob. */
  v8::V8::SetFlagsFromString("--no-verify-snapshot-checksum");
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

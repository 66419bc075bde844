/*
 * Process-wide V8 set-up.
 */
#include <libplatform/libplatform.h>

#include <stdio.h>
#include <stdlib.h>

#include <memory>

#include "internal.h"

namespace {

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

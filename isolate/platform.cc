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
  return platform != nullptr;
}

}  // namespace iso

int iso_platform_init(void) {
  if (platform != nullptr)
    return 0;
  /* Each worker process runs one loop per core: one background thread for
   * V8's compilers and GC is its fair share. */
  platform = v8::platform::NewDefaultPlatform(1);
  if (platform == nullptr)
    return -1;
  v8::V8::InitializePlatform(platform.get());
  /* libnode uses the system's ICU, whose data is linked in: no data file to find. */
  if (!v8::V8::InitializeICU())
    log_warn("V8 could not initialise ICU: Intl may not work");
  if (!v8::V8::Initialize())
    return -1;
  return 0;
}

const char *iso_v8_version(void) {
  return v8::V8::GetVersion();
}

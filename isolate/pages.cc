/*
 * Heap pages handed from an isolate that is gone to the next one made.
 *
 * Making an isolate writes about a megabyte of fresh heap pages, and on a
 * virtual machine each first touch of a 4 KiB page is a costly fault: over
 * a third of what making and freeing a blank isolate cost, measured on one
 * (docs/benchmarks.md). Freeing an isolate unmaps the same amount. Isolates come and go all the time (cold
 * loads, one-shot runs, evictions), so the regions V8 frees are kept mapped,
 * up to a bound, and given to the next isolate that asks for a region of
 * that size.
 *
 * A kept region holds nothing of the isolate that had it: every page of it
 * that is resident is zeroed, as a fresh mapping would be. Unlike a fresh
 * mapping it stays writable while kept, and V8 gets it so even when it asks
 * for an inaccessible region (it opens what it uses right after, and closes
 * its guard pages itself): closing a resident page and opening it again
 * costs about as much, on a virtual machine, as the fault it saves.
 */
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>
#include <vector>

#include "internal.h"

namespace iso {
namespace {

/* What is kept at most: enough for a few isolates' worth of churn. */
constexpr size_t kMaxRegions = 96;
constexpr size_t kMaxResidentBytes = 16u << 20;
/* V8's heap pages are regions of exactly this size; reservations this
 * large are code ranges, which hold few resident pages. */
constexpr size_t kHeapPageBytes = 256u << 10;
constexpr size_t kMinReservationBytes = 64u << 20;

thread_local bool tearing_down;

struct kept_region {
  void *start;
  size_t length;
  size_t resident;  /* bytes zeroed and left resident */
};

bool keepable_size(size_t length) {
  return length == kHeapPageBytes || length >= kMinReservationBytes;
}

/* The bytes of [start, start+length) in memory; -1 when the kernel cannot say. */
ssize_t resident_bytes(void *start, size_t length, size_t page, bool zero) {
  unsigned char vec[4096];
  size_t total = 0;
  for (size_t done = 0; done < length;) {
    size_t chunk = length - done < sizeof vec * page ? length - done : sizeof vec * page;
    char *base = (char *)start + done;
    if (mincore(base, chunk, vec) != 0)
      return -1;
    for (size_t i = 0; i * page < chunk; i++) {
      if (!(vec[i] & 1))
        continue;
      total += page;
      if (zero)
        memset(base + i * page, 0, page);
    }
    done += chunk;
  }
  return (ssize_t)total;
}

class reusing_pages final : public forwarding_pages {
 public:
  explicit reusing_pages(v8::PageAllocator *inner)
      : forwarding_pages(inner), page_((size_t)sysconf(_SC_PAGESIZE)) {}

  void *AllocatePages(void *hint, size_t length, size_t alignment,
                      Permission permissions) override {
    if (permissions == kNoAccess && keepable_size(length)) {
      void *kept = take(length, alignment);
      if (kept != nullptr)
        return kept;
    }
    return inner_->AllocatePages(hint, length, alignment, permissions);
  }

  bool FreePages(void *address, size_t length) override {
    untouched(address, true);
    if (keepable_size(length) && keep(address, length))
      return true;
    return inner_->FreePages(address, length);
  }

  /* Closing pages makes the default allocator discard them too, and the
   * next touch faults them in again. Two kinds are left as they are:
   * - while an isolate is torn down, V8 closes pages it frees right after;
   * - a kept code range is closed again as soon as a new isolate has it,
   *   before V8 opens its first page: its resident pages are zero already. */
  bool SetPermissions(void *address, size_t length, Permission permissions) override {
    if (permissions == kNoAccess) {
      if (tearing_down || untouched(address, false))
        return true;
    } else {
      untouched(address, true);
    }
    return inner_->SetPermissions(address, length, permissions);
  }

  void counts(iso_page_stats *out) {
    std::lock_guard<std::mutex> lock(mu_);
    out->kept_regions = kept_.size();
    out->kept_resident_bytes = resident_total_;
    out->reused_regions = reused_;
  }

 private:
  /* Whether `address` is in a reservation just taken from the kept ones
   * and not opened since; `forget` ends that (V8 opens some of it, or
   * frees it). */
  bool untouched(void *address, bool forget) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < untouched_.size(); i++) {
      char *start = (char *)untouched_[i].start;
      if ((char *)address < start || (char *)address >= start + untouched_[i].length)
        continue;
      if (forget)
        untouched_.erase(untouched_.begin() + (long)i);
      return true;
    }
    return false;
  }

  void *take(size_t length, size_t alignment) {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = kept_.size(); i-- > 0;) {
      kept_region r = kept_[i];
      if (r.length != length || (uintptr_t)r.start % alignment != 0)
        continue;
      kept_.erase(kept_.begin() + (long)i);
      resident_total_ -= r.resident;
      reused_++;
      if (length >= kMinReservationBytes)
        untouched_.push_back(r);
      return r.start;
    }
    return nullptr;
  }

  /* Zeroes what is resident; false leaves the region to the caller to unmap. */
  bool keep(void *start, size_t length) {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.size() >= kMaxRegions)
      return false;
    ssize_t resident = resident_bytes(start, length, page_, false);
    if (resident < 0 || resident_total_ + (size_t)resident > kMaxResidentBytes)
      return false;
    if (mprotect(start, length, PROT_READ | PROT_WRITE) != 0)
      return false;
    resident = resident_bytes(start, length, page_, true);
    if (resident < 0)
      return false;
    kept_.push_back(kept_region{start, length, (size_t)resident});
    resident_total_ += (size_t)resident;
    return true;
  }

  size_t page_;
  std::mutex mu_;  /* V8 frees pages on its background threads too */
  std::vector<kept_region> kept_;
  std::vector<kept_region> untouched_;  /* reservations handed out, not yet opened */
  size_t resident_total_ = 0;
  uint64_t reused_ = 0;
};

reusing_pages *the_pages;

}  // namespace

v8::PageAllocator *pages_reusing(v8::PageAllocator *inner) {
  if (the_pages == nullptr)
    the_pages = new reusing_pages(inner);
  return the_pages;
}

pages_teardown_scope::pages_teardown_scope() : saved_(tearing_down) {
  tearing_down = true;
}

pages_teardown_scope::~pages_teardown_scope() {
  tearing_down = saved_;
}

}  // namespace iso

void iso_page_stats_get(iso_page_stats *out) {
  memset(out, 0, sizeof *out);
  if (iso::the_pages != nullptr)
    iso::the_pages->counts(out);
}

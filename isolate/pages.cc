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
 * that is resident is zeroed, and where the system has swap, the pages that
 * are not resident are dropped, as a fresh mapping would have them. Unlike a
 * fresh mapping it stays writable while kept, and V8 gets it so even when it
 * asks for an inaccessible region (it opens what it uses right after, and
 * closes its guard pages itself): closing a resident page and opening it
 * again costs about as much, on a virtual machine, as the fault it saves.
 * Under MPK, where a kept region sits on key 0, it is closed all the same.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "internal.h"

namespace iso {
namespace {

/* What is kept at most: the churn of a few dozen isolates in flight (64
 * cold loads at once on a loader), given back when it is no longer used
 * (iso_page_trim). */
constexpr size_t kMaxRegions = 512;
constexpr size_t kMaxResidentBytes = 64u << 20;
/* The two sizes of region every isolate asks for: V8's heap pages, and its
 * code range, which holds few resident pages. Large objects get regions of
 * their own size, which the next isolate would hardly ever ask for. */
constexpr size_t kHeapPageBytes = 256u << 10;
constexpr size_t kCodeRangeBytes = 128u << 20;
/* The start of a code range that holds the isolate's first code page: its
 * builtins' code objects, byte for byte the same in every isolate of the
 * process (docs/benchmarks.md, "Memory per idle worker"). */
constexpr size_t kCodeWindowPages = 64;
#ifdef MFD_NOEXEC_SEAL
constexpr unsigned kNoExecSeal = MFD_NOEXEC_SEAL;
#else
constexpr unsigned kNoExecSeal = 0x0008u; /* Linux 6.3 */
#endif

thread_local bool tearing_down;
/* Regions asked for, by any isolate: what heap_check() (run.cc) looks
 * at to know whether any heap may have grown. */
std::atomic<uint64_t> heap_growths;

/* What a whole heap page was last opened to, where that is known. */
enum class access { unknown, none, read_write };

access access_of(v8::PageAllocator::Permission p) {
  switch (p) {
  case v8::PageAllocator::kNoAccess: return access::none;
  case v8::PageAllocator::kReadWrite: return access::read_write;
  default: return access::unknown;
  }
}

struct kept_region {
  void *start;
  size_t length;
  size_t resident;  /* bytes zeroed and left resident */
  access now;
  uint64_t kept_ns;  /* since when */
};

/* The first heap page of a code range (where its start is rounded up to):
 * what V8 last set each of its pages to, and which of them are mapped from
 * the process's copy of the builtins (bit i: page i). */
struct code_window {
  char *base;
  v8::PageAllocator::Permission permission[kCodeWindowPages];
  uint64_t shared;
  uint64_t own;  /* of those, written back with the isolate's own bytes */
};

/* The window's pages V8 has open to read and execute (bit i: page i). */
uint64_t code_pages(const code_window &w) {
  uint64_t code = 0;
  for (size_t i = 0; i < kCodeWindowPages; i++)
    if (w.permission[i] == v8::PageAllocator::kReadExecute)
      code |= 1ull << i;
  return code;
}

uint64_t span_bits(size_t i, size_t j) {
  return (j - i == 64 ? ~0ull : ((1ull << (j - i)) - 1)) << i;
}

/* The next run of set bits of `mask` at or after *i and below `end`:
 * [*i, *j); false when there is none. */
bool next_run(uint64_t mask, size_t end, size_t *i, size_t *j) {
  while (*i < end && !(mask >> *i & 1))
    (*i)++;
  if (*i >= end)
    return false;
  for (*j = *i; *j < end && (mask >> *j & 1);)
    (*j)++;
  return true;
}

bool keepable_size(size_t length) {
  return length == kHeapPageBytes || length == kCodeRangeBytes;
}

/* Whether the system may have swapped pages out: mincore() reports a page
 * that is in swap as not resident, and zeroing skips it. */
bool swap_configured() {
  struct sysinfo si;
  return sysinfo(&si) != 0 || si.totalswap > 0;
}

class reusing_pages final : public forwarding_pages {
 public:
  reusing_pages(v8::PageAllocator *inner, bool retagged)
      : forwarding_pages(inner), retagged_(retagged), swap_(swap_configured()) {
    long size = sysconf(_SC_PAGESIZE);
    page_ = size > 0 ? (size_t)size : 4096;
    const char *env = getenv("EDGENODE_SHARED_BUILTINS");
    if (env != nullptr && strcmp(env, "off") == 0) {
      log_info("builtins not shared between isolates (EDGENODE_SHARED_BUILTINS=off)");
      sharing_off_ = true;
    }
  }

  void *AllocatePages(void *hint, size_t length, size_t alignment,
                      Permission permissions) override {
    heap_growths.fetch_add(1, std::memory_order_relaxed);
    if (permissions == kNoAccess && keepable_size(length)) {
      void *kept = take(length, alignment);
      if (kept != nullptr) {
        if (length == kCodeRangeBytes) {
          std::lock_guard<std::mutex> lock(mu_);
          watch_code_window(kept, permissions);
        }
        return kept;
      }
    }
    void *p = inner_->AllocatePages(hint, length, alignment, permissions);
    if (p != nullptr && keepable_size(length)) {
      std::lock_guard<std::mutex> lock(mu_);
      fresh_++;
      if (length == kHeapPageBytes)
        heap_pages_[p] = access_of(permissions);
      else
        watch_code_window(p, permissions);
    }
    return p;
  }

  bool FreePages(void *address, size_t length) override {
    bool plain = unwatch_code_window(address);
    access now = forget(address, &length);
    if (plain && keepable_size(length) && keep(address, length, now))
      return true;
    return inner_->FreePages(address, length);
  }

  /* Every system call is dear on a virtual machine, and closing pages makes
   * the default allocator discard them too, so that the next touch faults
   * them in again. Left as they are:
   * - a whole heap page set to what it already is;
   * - pages V8 closes while it tears an isolate down: it frees them next;
   * - a kept code range, closed as soon as a new isolate has it, before V8
   *   opens its first page: its resident pages are zero already. */
  bool SetPermissions(void *address, size_t length, Permission permissions) override {
    if (permissions == kNoAccess && tearing_down)
      return true;
    std::unique_lock<std::mutex> lock(mu_);
    char *start;
    size_t first, end;
    bool in_window = window_span(address, length, &start, &first, &end) != nullptr;
    if (in_window && permissions == kNoAccess)
      unshare_code(address, length);
    if (!unchanged(address, length, permissions)) {
      /* In a code window the change and its note are one step (share_code
       * must not find a page open for writing noted as read-execute);
       * elsewhere the system call is made outside the lock. */
      if (!in_window)
        lock.unlock();
      if (!inner_->SetPermissions(address, length, permissions))
        return false;
      if (!in_window)
        lock.lock();
      changed(address, length, permissions);
    }
    if (in_window)
      note_code_permissions(address, length, permissions);
    return true;
  }

  /* Once it has read a snapshot, V8 gives back the tail of the heap pages
   * whose objects never move. Unmapped, the tail would leave a region of an
   * odd size, unmapped in turn when the isolate goes, and the next isolate
   * would map a fresh page in its place and fault all of it in: five
   * system calls that change the mappings (each flushes the TLB of every
   * core the process runs on, dear on a virtual machine) for each of two
   * pages per isolate. The tail's pages are dropped instead, which gives
   * their memory back all the same, and the whole page is kept when V8
   * frees the rest. Under MPK the tail is unmapped as before, so that no
   * page of a freed isolate keeps its key. */
  bool ReleasePages(void *address, size_t length, size_t new_length) override {
    unwatch_code_window(address);
    if (!retagged_ && shorten(address, length)) {
      if (madvise((char *)address + new_length, length - new_length, MADV_DONTNEED) != 0)
        log_warn("could not drop %zu bytes of a heap page: %s", length - new_length,
                 strerror(errno));
      return true;
    }
    forget(address, nullptr);
    return inner_->ReleasePages(address, length, new_length);
  }

  bool DiscardSystemPages(void *address, size_t size) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      unshare_code(address, size);
    }
    return inner_->DiscardSystemPages(address, size);
  }

  bool DecommitPages(void *address, size_t size) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      unshare_code(address, size);
    }
    if (!inner_->DecommitPages(address, size))
      return false;
    std::lock_guard<std::mutex> lock(mu_);
    note_code_permissions(address, size, kNoAccess);
    auto it = heap_pages_.find(heap_page_of(address));
    if (it != heap_pages_.end())
      it->second = size == kHeapPageBytes && it->first == address ? access::none : access::unknown;
    return true;
  }

  /* Kept pages are for churn, not to hold memory: what no isolate took
   * within `age_ns` goes back to the system. */
  void trim(uint64_t age_ns) {
    std::vector<kept_region> old;
    bool swap = swap_configured();
    {
      std::lock_guard<std::mutex> lock(mu_);
      swap_ = swap;
      uint64_t now = time_mono_ns();
      for (size_t i = kept_.size(); i-- > 0;) {
        if (now - kept_[i].kept_ns <= age_ns)
          continue;
        old.push_back(kept_[i]);
        resident_total_ -= kept_[i].resident;
        kept_.erase(kept_.begin() + (long)i);
      }
    }
    for (const kept_region &r : old)
      if (!inner_->FreePages(r.start, r.length))
        log_warn("could not unmap %zu bytes of kept heap pages", r.length);
  }

  /* Maps the pages at the start of the code range at `range_start` that
   * hold exactly what the process's copy of the builtins holds from that
   * copy, privately: they take no memory of their own until touched, and
   * a write to one copies it as before. Called where nothing runs in that
   * isolate: just after it was made, and after a full collection. */
  void share_code(void *range_start) {
    std::lock_guard<std::mutex> lock(mu_);
    if (retagged_ || sharing_off_)
      return;
    auto it = code_windows_.find((uintptr_t)range_start);
    if (it == code_windows_.end())
      return;
    code_window &w = it->second;
    char *start = w.base;
    uint64_t code = code_pages(w);
    if (code == 0)
      return;
    uint64_t same = same_as_builtins(start, code);
    /* The builtins' code objects point into V8's read-only heap, made anew
     * once every isolate of the process was gone: a copy that no isolate
     * matches or maps any more is made again from this one. */
    if (builtins_ != nullptr && same == 0 && !any_shared())
      forget_builtins();
    if (builtins_ == nullptr) {
      if (!copy_builtins(start, code)) {
        sharing_off_ = true;
        return;
      }
      same = same_as_builtins(start, code);
    }
    /* A run of code pages is mapped whole, the pages of it that differ
     * (this isolate's own) written back over the copy's: one mapping, as
     * before, instead of one for each side of every difference. */
    for (size_t i = 0, j; next_run(code & builtins_pages_, kCodeWindowPages, &i, &j); i = j) {
      uint64_t span = span_bits(i, j);
      if ((w.shared & span) == span)
        drop_copies(start, i, j, same);
      else if (span & same && !map_builtins(start, w, i, j, same)) {
        sharing_off_ = true;
        return;
      }
    }
  }

  /* A run mapped before (a worker compacted after its collection read
   * every builtin): the pages still the same as the copy are dropped, to be
   * read from the file again; nothing else changes. */
  void drop_copies(char *start, size_t i, size_t j, uint64_t same) {
    for (size_t k = i, end; next_run(same, j, &k, &end); k = end)
      if (madvise(start + k * page_, (end - k) * page_, MADV_DONTNEED) != 0)
        log_warn("could not drop %zu pages of shared builtins: %s", end - k, strerror(errno));
  }

  void counts(iso_page_stats *out) {
    std::lock_guard<std::mutex> lock(mu_);
    size_t from_copy = 0;
    for (const auto &window : code_windows_)
      from_copy += (size_t)__builtin_popcountll(window.second.shared & ~window.second.own);
    out->shared_code_bytes = from_copy * page_;
    out->kept_regions = kept_.size();
    out->kept_resident_bytes = resident_total_;
    out->reused_regions = reused_;
    out->fresh_regions = fresh_;
  }

 private:
  static void *heap_page_of(void *address) {
    return (void *)((uintptr_t)address & ~(uintptr_t)(kHeapPageBytes - 1));
  }

  /* ---- The code window: see share_code ---- */

  /* Called with mu_ held, for a code range just handed to V8. */
  void watch_code_window(void *start, Permission permissions) {
    code_window w;
    w.base = (char *)(((uintptr_t)start + kHeapPageBytes - 1) & ~(uintptr_t)(kHeapPageBytes - 1));
    for (Permission &p : w.permission)
      p = permissions;
    w.shared = 0;
    w.own = 0;
    code_windows_[(uintptr_t)start] = w;
  }

  /* Before the code range at `address` goes (or shrinks): its pages mapped
   * from the copy become plain ones again, so that the range is kept or
   * unmapped as any. False when some could not be: the range is then not
   * to be kept. */
  bool unwatch_code_window(void *address) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = code_windows_.find((uintptr_t)address);
    if (it == code_windows_.end())
      return true;
    bool plain = unshare_code(it->second.base, kCodeWindowPages * page_);
    code_windows_.erase(it);
    return plain;
  }

  /* The window whose code range holds [address, address + length), its
   * first page, and the pages of it that span covers: [*first, *end). Called
   * with mu_ held. */
  code_window *window_span(void *address, size_t length, char **start, size_t *first,
                           size_t *end) {
    auto it = code_windows_.upper_bound((uintptr_t)address);
    if (it == code_windows_.begin())
      return nullptr;
    --it;
    if ((uintptr_t)address - it->first >= kCodeRangeBytes)
      return nullptr;
    code_window *w = &it->second;
    char *from = (char *)address, *to = from + length;
    char *window_end = w->base + kCodeWindowPages * page_;
    if (to <= w->base || from >= window_end)
      return nullptr;
    *start = w->base;
    *first = from <= w->base ? 0 : (size_t)(from - w->base) / page_;
    *end = to >= window_end ? kCodeWindowPages : (size_t)(to - w->base + page_ - 1) / page_;
    return w;
  }

  /* Called with mu_ held. */
  void note_code_permissions(void *address, size_t length, Permission permissions) {
    char *start;
    size_t first, end;
    code_window *w = window_span(address, length, &start, &first, &end);
    for (size_t i = first; w != nullptr && i < end; i++)
      w->permission[i] = permissions;
  }

  /* Pages in [address, address + length) mapped from the copy become
   * anonymous ones of the same access: what V8 closes, discards or gives
   * back reads as zeros, as with any other page. Called with mu_ held. A
   * failure leaves them mapped, which holds the same bytes. */
  bool unshare_code(void *address, size_t length) {
    char *start;
    size_t first, end;
    code_window *w = window_span(address, length, &start, &first, &end);
    if (w == nullptr)
      return true;
    bool plain = true;
    for (size_t i = first, j; next_run(w->shared, end, &i, &j); i = j) {
      /* One mapping per access: the run ends where the next page's differs. */
      for (size_t k = i + 1; k < j; k++)
        if (w->permission[k] != w->permission[i])
          j = k;
      void *p = mmap(start + i * page_, (j - i) * page_, prot_of(w->permission[i]),
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p == MAP_FAILED) {
        log_warn("could not unshare %zu code pages: %s", j - i, strerror(errno));
        plain = false;
      } else {
        w->shared &= ~span_bits(i, j);
        w->own &= ~span_bits(i, j);
      }
    }
    return plain;
  }

  /* Of the window's code pages, those that hold what the copy holds. */
  uint64_t same_as_builtins(const char *start, uint64_t code) {
    uint64_t same = 0;
    for (size_t i = 0; builtins_ != nullptr && i < kCodeWindowPages; i++)
      if ((code & builtins_pages_) >> i & 1 &&
          memcmp(start + i * page_, builtins_ + i * page_, page_) == 0)
        same |= 1ull << i;
    return same;
  }

  /* Whether any isolate's window is mapped from the copy. */
  bool any_shared() {
    for (const auto &window : code_windows_)
      if (window.second.shared != 0)
        return true;
    return false;
  }

  void forget_builtins() {
    munmap((void *)builtins_, kCodeWindowPages * page_);
    close(builtins_fd_);
    builtins_ = nullptr;
    builtins_fd_ = -1;
    builtins_pages_ = 0;
  }

  /* The builtins' pages of the first code range seen, copied into a memory
   * file that every later isolate's window is mapped from. */
  bool copy_builtins(char *start, uint64_t code) {
    /* Sealed against being run as a program, which is all vm.memfd_noexec
     * asks (mappings may still execute); older kernels know no such seal. */
    int fd = memfd_create("edgenode-builtins", MFD_CLOEXEC | kNoExecSeal);
    if (fd < 0 && errno == EINVAL)
      fd = memfd_create("edgenode-builtins", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)(kCodeWindowPages * page_)) != 0) {
      log_warn("builtins not shared between isolates: no memory file: %s", strerror(errno));
      if (fd >= 0)
        close(fd);
      return false;
    }
    for (size_t i = 0; i < kCodeWindowPages; i++) {
      if (!(code >> i & 1))
        continue;
      off_t at = (off_t)(i * page_);
      if (pwrite(fd, start + i * page_, page_, at) != (ssize_t)page_) {
        log_warn("builtins not shared between isolates: cannot copy them: %s", strerror(errno));
        close(fd);
        return false;
      }
    }
    /* What map_builtins does, once: some systems refuse to execute a
     * private mapping of a file once it was written (SELinux's execmod). */
    bool runs = false;
    void *probe = mmap(nullptr, page_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (probe != MAP_FAILED) {
      *(volatile char *)probe = 1;  /* a private copy, as a page written back */
      runs = mprotect(probe, page_, PROT_READ | PROT_EXEC) == 0;
      munmap(probe, page_);
    }
    void *view = runs ? mmap(nullptr, kCodeWindowPages * page_, PROT_READ, MAP_SHARED, fd, 0)
                      : MAP_FAILED;
    if (view == MAP_FAILED) {
      log_warn("builtins not shared between isolates: cannot map them: %s", strerror(errno));
      close(fd);
      return false;
    }
    builtins_fd_ = fd;
    if (!uffd_tried_) {
      uffd_tried_ = true;
      uffd_ = open_uffd();
      if (uffd_ < 0)
        log_info("shared builtins fault 64 KiB at a time: no userfaultfd: %s", strerror(errno));
    }
    builtins_ = (const unsigned char *)view;
    builtins_pages_ = code;
    return true;
  }

  /* A first touch of a file's page maps the 15 next to it as well (the
   * kernel's fault-around), and each isolate would soon hold most of the
   * window again: one page of builtins used maps 64 KiB. A range registered
   * with a userfaultfd for write protection is faulted page by page; no
   * page is ever protected, so no fault ever goes to that descriptor. */
  void no_fault_around(char *at, size_t length) {
    if (uffd_ < 0)
      return;
    struct uffdio_register range = {};
    range.range.start = (uintptr_t)at;
    range.range.len = length;
    range.mode = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(uffd_, UFFDIO_REGISTER, &range) != 0) {
      log_info("shared builtins fault 64 KiB at a time: %s", strerror(errno));
      close(uffd_);
      uffd_ = -1;
    }
  }

  static int open_uffd() {
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0)
      fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
      return -1;
    struct uffdio_api api = {};
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
      close(fd);
      return -1;
    }
    return fd;
  }

  /* Maps pages [i, j) of the window from the builtins' file, with the
   * pages not in `same` written back with the isolate's own bytes. The run
   * is made ready at an address of its own and moved into place in one
   * step, so that the window always holds the isolate's bytes; false, with
   * the window as it was, when the system would not. */
  bool map_builtins(char *start, code_window &w, size_t i, size_t j, uint64_t same) {
    char *at = start + i * page_;
    size_t length = (j - i) * page_;
    void *ready = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE, builtins_fd_,
                       (off_t)(i * page_));
    if (ready == MAP_FAILED) {
      log_warn("builtins not shared between isolates: cannot map them: %s", strerror(errno));
      return false;
    }
    for (size_t k = i; k < j; k++) {
      if (same >> k & 1)
        continue;
      char *own = (char *)ready + (k - i) * page_;
#ifdef MADV_POPULATE_WRITE
      /* The private copy made in one call (Linux 5.14; older kernels refuse
       * and the write below faults): a write fault is dear on a VM. */
      (void)madvise(own, page_, MADV_POPULATE_WRITE);
#endif
      memcpy(own, start + k * page_, page_);
    }
    if (mprotect(ready, length, PROT_READ | PROT_EXEC) != 0 ||
        mremap(ready, length, length, MREMAP_MAYMOVE | MREMAP_FIXED, at) == MAP_FAILED) {
      log_warn("builtins not shared between isolates: cannot map them: %s", strerror(errno));
      if (!window_mapped(at)) {
        restore_from(ready, at, length);
        w.shared &= ~span_bits(i, j);
        w.own &= ~span_bits(i, j);
      }
      munmap(ready, length);
      return false;
    }
    no_fault_around(at, length);
    w.shared |= span_bits(i, j);
    w.own = (w.own & ~span_bits(i, j)) | (span_bits(i, j) & ~same);
    return true;
  }

  /* Whether the page at `at` is mapped: a move that failed may have
   * unmapped its target first (at the limit of mappings per process). */
  bool window_mapped(char *at) {
    return msync(at, page_, MS_ASYNC) == 0 || errno != ENOMEM;
  }

  /* Puts back the bytes of a run whose mapping a failed move took away.
   * Without them V8 cannot go on: if this fails too, the process stops. */
  void restore_from(const void *ready, char *at, size_t length) {
    bool restored = mmap(at, length, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED;
    if (restored) {
      memcpy(at, ready, length);
      restored = mprotect(at, length, PROT_READ | PROT_EXEC) == 0;
    }
    if (!restored) {
      log_error("cannot restore %zu bytes of code: %s", length, strerror(errno));
      abort();
    }
  }

  /* Whether V8's request changes nothing that matters (see SetPermissions).
   * Called with mu_ held, as is changed(). */
  bool unchanged(void *address, size_t length, Permission permissions) {
    auto it = heap_pages_.find(heap_page_of(address));
    if (it != heap_pages_.end()) {
      bool whole = it->first == address && length == kHeapPageBytes;
      return whole && access_of(permissions) != access::unknown &&
             access_of(permissions) == it->second;
    }
    return permissions == kNoAccess && untouched_at(address) >= 0;
  }

  /* What a request V8 made of the system changed. */
  void changed(void *address, size_t length, Permission permissions) {
    auto it = heap_pages_.find(heap_page_of(address));
    if (it != heap_pages_.end()) {
      bool whole = it->first == address && length == kHeapPageBytes;
      it->second = whole ? access_of(permissions) : access::unknown;
      return;
    }
    long i = untouched_at(address);
    if (i >= 0 && permissions != kNoAccess)
      untouched_.erase(untouched_.begin() + i);
  }

  /* The reservation just taken from the kept ones, not opened since, that
   * holds `address`; -1 when none. Called with mu_ held. */
  long untouched_at(void *address) {
    for (size_t i = 0; i < untouched_.size(); i++) {
      char *start = (char *)untouched_[i].start;
      if ((char *)address >= start && (char *)address < start + untouched_[i].length)
        return (long)i;
    }
    return -1;
  }

  /* Whether the region at `address`, `length` long to V8, is a heap page
   * still mapped whole; if so it is followed as shortened from now on. */
  bool shorten(void *address, size_t length) {
    std::lock_guard<std::mutex> lock(mu_);
    if (shortened_.count(address) > 0)
      return true;
    auto it = heap_pages_.find(address);
    if (it == heap_pages_.end() || length != kHeapPageBytes)
      return false;
    heap_pages_.erase(it);
    shortened_.insert(address);
    return true;
  }

  /* Stops following the region at `address`; what its pages were open to.
   * `length`, if given, becomes what is mapped there when V8 shortened it. */
  access forget(void *address, size_t *length) {
    std::lock_guard<std::mutex> lock(mu_);
    if (shortened_.erase(address) > 0) {
      if (length != nullptr)
        *length = kHeapPageBytes;
      return access::unknown;
    }
    auto it = heap_pages_.find(address);
    if (it != heap_pages_.end()) {
      access now = it->second;
      heap_pages_.erase(it);
      return now;
    }
    for (size_t i = 0; i < untouched_.size(); i++) {
      if (untouched_[i].start == address) {
        untouched_.erase(untouched_.begin() + (long)i);
        break;
      }
    }
    return access::unknown;
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
      if (length == kHeapPageBytes)
        /* Under MPK the key allocator closes the page as it tags it. */
        heap_pages_[r.start] = retagged_ ? access::none : r.now;
      else
        untouched_.push_back(r);
      return r.start;
    }
    return nullptr;
  }

  /* Zeroes what is resident; false leaves the region to the caller to unmap.
   * The work is done before the lock is taken to publish it: the region is
   * nobody else's until then, and the thread doing it may be the pool's, of
   * lower priority, which must not hold up a loop that asks for pages. */
  bool keep(void *start, size_t length, access now) {
    bool swap;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (kept_.size() >= kMaxRegions)
        return false;
      swap = swap_;
    }
    std::vector<unsigned char> residency(length / page_);
    if (mincore(start, length, residency.data()) != 0)
      return false;
    size_t resident = 0;
    for (unsigned char r : residency)
      resident += (r & 1) * page_;
    if (!room_for(resident))
      return false;
    if (resident > 0) {
      if (now != access::read_write && mprotect(start, length, PROT_READ | PROT_WRITE) != 0)
        return false;
      now = access::read_write;
      for (size_t i = 0; i < residency.size(); i++)
        if (residency[i] & 1)
          memset((char *)start + i * page_, 0, page_);
    }
    if (swap && !drop_swapped(start, residency))
      return false;
    /* Under MPK the region sits on key 0 while kept: no isolate may write
     * into what the next one will be given. */
    if (retagged_ && now != access::none) {
      if (mprotect(start, length, PROT_NONE) != 0)
        return false;
      now = access::none;
    }
    std::lock_guard<std::mutex> lock(mu_);
    /* Others may have kept regions meanwhile: the bounds hold all the same. */
    if (kept_.size() >= kMaxRegions || resident_total_ + resident > kMaxResidentBytes)
      return false;
    kept_.push_back(kept_region{start, length, resident, now, time_mono_ns()});
    resident_total_ += resident;
    return true;
  }

  bool room_for(size_t resident) {
    std::lock_guard<std::mutex> lock(mu_);
    return resident_total_ + resident <= kMaxResidentBytes;
  }

  /* Pages not resident may be in swap, holding the old tenant's bytes:
   * they are dropped, to come back as zeros. `residency` is mincore()'s
   * reading of the region at `start`. */
  bool drop_swapped(void *start, const std::vector<unsigned char> &residency) {
    size_t n = residency.size();
    for (size_t i = 0; i < n;) {
      if (residency[i] & 1) {
        i++;
        continue;
      }
      size_t j = i;
      while (j < n && !(residency[j] & 1))
        j++;
      if (madvise((char *)start + i * page_, (j - i) * page_, MADV_DONTNEED) != 0)
        return false;
      i = j;
    }
    return true;
  }

  size_t page_;
  bool retagged_;  /* pages handed out are closed again by the key allocator */
  bool swap_;      /* swap_configured(), as of the last trim */
  std::mutex mu_;  /* V8 frees pages on its background threads too */
  std::vector<kept_region> kept_;
  std::unordered_map<void *, access> heap_pages_;  /* live whole heap pages */
  std::unordered_set<void *> shortened_;  /* live heap pages V8 shortened */
  std::vector<kept_region> untouched_;  /* reservations handed out, not yet opened */
  std::map<uintptr_t, code_window> code_windows_;  /* by the start of their code range */
  int builtins_fd_ = -1;
  int uffd_ = -1;  /* only to keep the builtins' pages from faulting around */
  bool uffd_tried_ = false;
  const unsigned char *builtins_ = nullptr;  /* builtins_fd_, mapped to compare with */
  uint64_t builtins_pages_ = 0;  /* the window's pages it holds */
  bool sharing_off_ = false;  /* the system would not map it */
  size_t resident_total_ = 0;
  uint64_t reused_ = 0;
  uint64_t fresh_ = 0;
};

reusing_pages *the_pages;

}  // namespace

int prot_of(v8::PageAllocator::Permission p) {
  switch (p) {
  case v8::PageAllocator::kRead: return PROT_READ;
  case v8::PageAllocator::kReadWrite: return PROT_READ | PROT_WRITE;
  case v8::PageAllocator::kReadWriteExecute: return PROT_READ | PROT_WRITE | PROT_EXEC;
  case v8::PageAllocator::kReadExecute: return PROT_READ | PROT_EXEC;
  default: return PROT_NONE;
  }
}

v8::PageAllocator *pages_reusing(v8::PageAllocator *inner, bool retagged) {
  if (the_pages == nullptr)
    the_pages = new reusing_pages(inner, retagged);
  return the_pages;
}

uint64_t pages_heap_growths() {
  return heap_growths.load(std::memory_order_relaxed);
}

pages_teardown_scope::pages_teardown_scope() : saved_(tearing_down) {
  tearing_down = true;
}

pages_teardown_scope::~pages_teardown_scope() {
  tearing_down = saved_;
}

void pages_share_code(v8::Isolate *isolate) {
  void *start = nullptr;
  size_t length = 0;
  isolate->GetCodeRange(&start, &length);
  if (the_pages != nullptr && start != nullptr && length == kCodeRangeBytes)
    the_pages->share_code(start);
}

void pages_trim(uint64_t older_than_ms) {
  if (the_pages != nullptr)
    the_pages->trim(older_than_ms * 1000000u);
}

}  // namespace iso

void iso_page_trim(uint64_t older_than_ms) {
  if (!iso::pool_trim(older_than_ms))
    iso::pages_trim(older_than_ms);
}

void iso_page_stats_get(iso_page_stats *out) {
  memset(out, 0, sizeof *out);
  if (iso::the_pages != nullptr)
    iso::the_pages->counts(out);
}

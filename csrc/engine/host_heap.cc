#include "engine/host_heap.h"

#include <malloc.h>

#include <atomic>

namespace tpu::engine {

namespace {
std::atomic<bool> g_kept{false};

// Large enough that no heap of this machine's size is ever trimmed on free.
constexpr int kNeverTrim = 1 << 30;
// A thread arena's heap is at most 64 MiB; a top pad of that size keeps an emptied
// heap from being unmapped (glibc's heap_trim keeps it when the pad cannot fit in
// what the previous heap could still grow by) and makes the main heap grow in steps
// that a step's temporaries fit in.
constexpr int kTopPad = 64 << 20;
}  // namespace

void keep_freed_host_memory() {
  if (g_kept.exchange(true)) return;
  // With no mmapped blocks, a request too large for a thread arena's heap is served
  // from the main heap (glibc retries there), which is kept like the rest.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, kNeverTrim);
  mallopt(M_TOP_PAD, kTopPad);
}

bool host_memory_kept() { return g_kept.load(); }

void release_host_memory() {
  if (g_kept.load()) malloc_trim(0);
}

}  // namespace tpu::engine

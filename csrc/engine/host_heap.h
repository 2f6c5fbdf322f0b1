// The CPU plugin's device memory is this process's heap: XLA's CPU client takes every
// buffer, and each program's temporary buffer, from glibc's malloc. glibc serves a
// request of 32 MiB or more with a fresh mmap and returns it on free, and gives a
// thread arena's emptied heap back to the kernel, so a program whose temporaries are
// that large (the GPT training step's: 53 MiB) faults every page of them in again on
// every run (~14k page faults, 15-25% of a Defer & Fuse step on two cores). Keeping
// freed memory in the heap for reuse is what CUDA's caching allocator does for device
// memory; empty_cache() gives it back, as there.
#pragma once

namespace tpu::engine {

// Makes glibc keep freed memory for reuse: no mmap for large blocks, no trimming of the
// heap's top, arenas' heaps kept. Process-wide and idempotent; the Runtime calls it
// before it starts the CPU plugin unless the user turned it off.
void keep_freed_host_memory();

// True once keep_freed_host_memory() has run in this process.
bool host_memory_kept();

// Returns the heap's free pages to the kernel (malloc_trim): torch.tpu.empty_cache()
// on the CPU plugin. A no-op unless the memory is kept.
void release_host_memory();

}  // namespace tpu::engine

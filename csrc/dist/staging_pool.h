// Host memory for host-staged collectives, kept between collectives.
//
// A fresh host tensor per collective costs more than the copy into it: the
// allocator maps new pages for anything large, and the kernel faults and zeroes
// each one on first touch (64 MB: ~16k faults). The pool hands out 64-byte
// aligned blocks of exactly the requested size and takes them back when the
// tensor that holds one dies, which for a block a device buffer aliases (zero-copy
// upload, see host_staging.h) is when that device buffer is freed. Steady state
// (DDP buckets, FSDP shards: the same sizes every step) allocates nothing.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace tpu::dist {

// A contiguous CPU tensor of `sizes`/`dtype` backed by pooled memory (contents
// undefined). Its storage returns the block to the pool when freed.
at::Tensor pooled_empty(c10::IntArrayRef sizes, c10::ScalarType dtype);

struct StagingPoolStats {
  int64_t idle_bytes = 0;    // blocks waiting in the pool
  int64_t fresh_allocs = 0;  // blocks allocated because none was idle
  int64_t reuses = 0;        // blocks handed out again
};
StagingPoolStats staging_pool_stats();

}  // namespace tpu::dist

// Counters every layer above PJRT reports into; read by torch_tpu.debug.metrics().
// Plain atomics: cheap enough for the per-op hot path.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace tpu::engine {

struct Metrics {
  std::atomic<uint64_t> ops_executed{0};       // ops run through a lowering
  std::atomic<uint64_t> programs_compiled{0};  // XLA compilations
  std::atomic<uint64_t> compile_ns{0};         // time spent in PJRT compile
  std::atomic<uint64_t> cache_hits{0};         // in-memory program cache
  std::atomic<uint64_t> cache_misses{0};
  std::atomic<uint64_t> executions{0};         // PJRT executions launched
  std::atomic<uint64_t> donated_inputs{0};     // buffers a program updated in place
  std::atomic<uint64_t> bytes_to_device{0};
  std::atomic<uint64_t> bytes_to_host{0};
  std::atomic<uint64_t> cpu_fallback_ops{0};
  std::atomic<uint64_t> host_tier_ops{0};       // lowered ops run on the host instead (aten/host_tier.h)
  // Persistent compile cache (engine/disk_cache.h): a disk hit replaces a compile.
  std::atomic<uint64_t> disk_hits{0};
  std::atomic<uint64_t> disk_misses{0};
  std::atomic<uint64_t> disk_bad_entries{0};    // corrupt/foreign/unreadable: recompiled
  std::atomic<uint64_t> disk_writes{0};
  std::atomic<uint64_t> disk_write_failures{0};
  std::atomic<uint64_t> disk_bytes_read{0};
  std::atomic<uint64_t> disk_bytes_written{0};
  std::atomic<uint64_t> disk_evictions{0};
  std::atomic<uint64_t> deserialize_ns{0};      // time spent loading disk hits

  // CPU-fallback op name -> count.
  std::map<std::string, uint64_t> fallback_counts();
  // Returns true the first time `op` falls back (the caller warns once).
  bool note_fallback(const std::string& op);
  // Where `op` first fell back ("file:line in function"), recorded once per op.
  void note_fallback_site(const std::string& op, const std::string& site);
  std::map<std::string, std::string> fallback_sites();
  void reset();

 private:
  std::mutex mu_;
  std::map<std::string, uint64_t> fallback_;
  std::map<std::string, std::string> fallback_site_;
};

Metrics& metrics();

}  // namespace tpu::engine

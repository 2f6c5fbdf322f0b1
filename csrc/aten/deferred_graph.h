// Defer & Fuse: each thread records its ops into its own pending trace
// (aten/trace.h), compiled as one fused program when a value is needed (see
// deferred_graph.cc).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "aten/op_call.h"

namespace tpu::aten {

// Records a prepared call (Call::deferred, after prepare()) and pushes its
// results, whose storages hold pending values.
// `pipelined`: a Strict Eager call (op_kernel.cc) that starts or continues a
// pipelined trace (Trace::pipelined) when this trace is empty or already one.
void record_deferred(Call& c, std::shared_ptr<Entry> e, bool pipelined = false);

// Whether this thread's trace holds pipelined Strict Eager ops (see op_kernel.cc).
bool pipelining_on_this_thread();

// Runs this thread's pending trace now (no-op when empty); `reason` is counted in stats.
void flush_pending(const std::string& reason);
// A memory query (the allocator's statistics, torch.tpu.memory_allocated, ...) is a
// Strict Eager sync point: this thread's pipelined ops run first, so the query
// counts what the ops as written leave allocated (their results, alive or already
// freed, are held until then). Defer & Fuse's pending step is not materialised.
// Lets go of the GIL while it waits, when the caller holds it.
void settle_for_memory_query();
// Runs every thread's pipelined Strict Eager trace (Trace::pipelined).
void flush_pipelined(const std::string& reason);
// Runs every thread's pending trace (torch.tpu.synchronize waits for all work).
void flush_all_pending(const std::string& reason);

// Runs the trace that holds `slot`'s pending value, and this thread's trace
// when it reads or writes `slot` (before the storage
// changes size under recorded work).
void flush_if_uses(engine::Slot* slot, const std::string& reason);

// Names the reason of flushes triggered by reading a pending storage on this
// thread while alive (e.g. "host read" around a device-to-host copy).
class FlushReason {
 public:
  explicit FlushReason(const char* reason);
  ~FlushReason();

 private:
  const char* prev_;
};

struct DeferredStats {
  uint64_t ops_recorded = 0;
  uint64_t graphs_run = 0;
  uint64_t graph_nodes_total = 0;
  uint64_t largest_graph = 0;
  uint64_t fused_cache_hits = 0;
  uint64_t fused_cache_misses = 0;
  // Traces whose shapes keep changing, run node by node (trace_by_node.h), and their nodes.
  uint64_t graphs_run_by_node = 0;
  uint64_t nodes_run_by_node = 0;
  // Traces run as their size's bucket program (deferred_buckets.h).
  uint64_t graphs_run_bucketed = 0;
  // Strict Eager's pipelined traces (op_kernel.cc) and their nodes.
  uint64_t graphs_pipelined = 0;
  uint64_t nodes_pipelined = 0;
  std::map<std::string, uint64_t> materializations;  // reason -> count
};
DeferredStats deferred_stats();
void reset_deferred_stats();
size_t pending_nodes();
void set_max_graph_nodes(size_t n);
size_t max_graph_nodes();
void clear_fused_cache();
void install_flush_hook();

}  // namespace tpu::aten

// A trace: the recorded nodes of one owner, the parameters they read, the
// storages they write and the structural key that finds their fused program.
//
// Defer & Fuse gives each thread its own trace (threads never serialise on one
// graph). A storage pending in a trace knows that trace (Slot::pending_owner),
// so a read from any thread runs the owner's trace; the owner's lock exists for
// that cross-thread flush and is otherwise uncontended. torch.compile records an
// FX graph once into the calling thread's trace and keeps what the flush
// compiled as a CompiledTrace (compiled_trace.h), called directly afterwards.
#pragma once

#include <ATen/core/Generator.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "aten/op_call.h"
#include "aten/python_stack.h"

namespace tpu::aten {

struct TraceParam {
  hlo::TensorType type;
  std::shared_ptr<pjrt::Buffer> buffer;  // a storage's contents when first read
  Input host;                            // otherwise: a host value or RNG state
  // kRng: the generator drawn from (none: the device's default) and how many
  // numbers the op consumes, so that a compiled trace draws exactly as eager.
  std::optional<at::Generator> gen;
  uint64_t rng_numbers = 0;
};

struct NodeInput {
  bool internal = false;  // true: a storage's pending value (id = trace slot)
  int id = -1;            // false: a parameter
};

struct Node {
  OpRecord rec;
  std::shared_ptr<Entry> entry;
  std::vector<NodeInput> ins;  // one per call input
  std::vector<int> outs;       // trace slot defined by each non-kNone OutSpec
  PyStack stack;               // where the user's code recorded it
};

struct TraceSlot {
  std::shared_ptr<engine::Slot> slot;
  int param = -1;        // parameter holding its value as read before any write
  bool written = false;  // produced or rewritten by the trace
};

// The device-side checks of a fused program: which spec and which node (and
// Python line) each flag belongs to. Built once per program run or compiled trace.
struct CheckSites {
  struct Site {
    std::string op;
    PyStack stack;
    size_t node;
  };
  std::vector<Site> sites;
  std::vector<std::shared_ptr<Entry>> entries;  // keep the specs alive
  std::vector<const lower::CheckSpec*> specs;
  size_t total_nodes = 0;
};

struct FusedProgram {
  std::shared_ptr<pjrt::Executable> exe;
  // The node of each device-side check; with any, the last output is their flags.
  std::vector<size_t> check_nodes;
  // Parameters aliased to an output (in-place updates; see build() in deferred_graph.cc).
  std::vector<int> donated;
};

// What one run of a trace did: for graph statistics and compiled traces.
struct RunInfo {
  // Set by the caller: the run becomes a CompiledTrace, which may keep a parameter's
  // buffer as a constant (so none is donated).
  bool capturing = false;
  bool ran = false;
  bool compiled = false;       // the fused cache missed
  double compile_seconds = 0;  // XLA compile or disk-cache load of that miss
  std::shared_ptr<FusedProgram> prog;
  std::vector<int> outputs;                  // trace slots the program wrote out
  std::vector<std::shared_ptr<engine::Slot>> slots;  // every trace slot, by id
  std::vector<TraceParam> params;            // the parameters, in program order
  std::vector<int> param_slot;               // per parameter: its trace slot, or -1
  std::shared_ptr<CheckSites> checks;
  // Describes the program's ops and Python lines if a launch of it fails on the
  // device (engine::launch's `where`); a compiled trace keeps it for its own launches.
  std::function<std::string()> where;
  int device = 0;
};

class Trace {
 public:
  std::mutex mu;  // the owner records under it; another thread takes it to flush
  std::vector<Node> nodes;
  std::vector<TraceSlot> slots;
  std::unordered_map<engine::Slot*, int> slot_ids;
  std::vector<TraceParam> params;
  std::string key;
  int device = -1;
  // A compiled graph being captured: never cut by the size bound.
  bool unbounded = false;
  // A node was recorded by autograd's backward: the trace never runs padded
  // (deferred_buckets.h), it runs at its own sizes.
  bool in_backward = false;
  // Strict Eager ops recorded while their programs compile in the background
  // (op_kernel.cc, pipelined): run node by node at the flush, each as its own
  // single-op program, never fused. Read by the owner without the lock.
  std::atomic<bool> pipelined{false};
  uint64_t runs = 0;  // programs run so far (a capture checks that none ran mid-graph)

  // Runs the nodes as one program (caller holds mu; no-op when empty). With
  // `info`, also reports what ran and the bindings a compiled trace needs.
  void flush_locked(const std::string& reason, RunInfo* info = nullptr);
};

// The calling thread's trace (made on first use; flushed when the thread ends).
const std::shared_ptr<Trace>& this_thread_trace();

}  // namespace tpu::aten

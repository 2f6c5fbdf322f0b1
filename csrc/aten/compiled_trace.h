// A compiled FX graph as an executable plus its bindings, called directly.
//
// The first call of a torch.compile graph records its ATen ops into the thread's
// trace (the same recorder as Defer & Fuse) and flushes it as one fused program.
// capture() keeps what that flush compiled together with how each program
// parameter and output relates to the graph's inputs and outputs:
//   - parameters: an input's storage, a constant uploaded once (a scalar of the
//     graph, a constant tensor), or an RNG state drawn from the generator with
//     the same count of numbers as eager would draw;
//   - program outputs: the new contents of a mutated input (swapped into its
//     storage, as copy_ would) or the storage of graph results;
//   - graph results: a view (sizes, strides, offset, dtype) of a new storage or
//     of an input's storage (outputs that alias inputs).
// run() then binds the inputs' buffers and launches the executable: no ATen op
// is dispatched or recorded. Dynamo's guards decide when a graph is reused; run()
// also checks what the program depends on and Dynamo does not guard (storage
// size and element type, offsets, input aliasing) and declines when they differ.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aten/trace.h"
#include "engine/async_errors.h"

namespace tpu::aten {

class CompiledTrace {
 public:
  // Records nothing itself: the caller ran the graph's ops in Defer & Fuse into
  // this thread's trace between begin_capture() and here. Flushes that trace as
  // one program and returns the trace of it, or null (with `why`) when the graph
  // cannot be one directly callable program; the results are valid either way.
  static std::shared_ptr<CompiledTrace> capture(const std::vector<at::Tensor>& inputs,
                                                const std::vector<at::Tensor>& results,
                                                uint64_t runs_before, RunInfo& info,
                                                std::string& why);

  // Whether `inputs` fit the bindings (cheap; no device work).
  bool matches(const std::vector<at::Tensor>& inputs) const;
  // Launches the program on `inputs`' buffers; the graph's results (undefined
  // where the graph returned no tpu tensor).
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs);

  uint64_t calls() const { return calls_; }
  size_t num_params() const { return params_.size(); }

 private:
  struct InputSig {
    c10::ScalarType dtype;
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
    int64_t nbytes = 0;
    int same_as = -1;      // an earlier input sharing the storage at capture
    bool written = false;  // the program rewrites its storage
  };
  struct ParamBind {
    enum Kind { kInput, kConst, kSlot, kRng } kind = kConst;
    int input = -1;                                // kInput
    hlo::TensorType type;                          // kInput: the storage as the program reads it
    std::shared_ptr<pjrt::Buffer> buffer;          // kConst
    std::shared_ptr<engine::Slot> slot;            // kSlot: a storage not among the inputs
    std::optional<at::Generator> gen;              // kRng
    uint64_t rng_numbers = 0;                      // kRng
  };
  struct OutBind {
    enum Kind { kWriteInput, kStorage } kind = kStorage;
    int index = -1;  // kWriteInput: input; kStorage: new storage
    hlo::ElemType elem = hlo::ElemType::F32;
  };
  struct Result {
    enum Kind { kNone, kNew, kInputView, kConstant } kind = kNone;
    int index = -1;  // kNew: new storage; kInputView: input
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
    at::Tensor constant;  // kConstant
  };

  std::shared_ptr<pjrt::Executable> exe_;
  std::shared_ptr<CheckSites> checks_;
  std::function<std::string()> where_;  // its ops and lines, for a failed launch
  std::shared_ptr<const engine::LaunchOrigin> origin_;  // made once from where_
  std::vector<int> donated_;  // input parameters the program updates in place
  int device_ = 0;
  std::vector<InputSig> sig_;
  std::vector<ParamBind> params_;
  std::vector<OutBind> outs_;
  std::vector<int64_t> storage_bytes_;  // per new storage
  std::vector<Result> results_;
  uint64_t calls_ = 0;
};

// Prepares this thread's trace for capturing a compiled graph: runs what is
// pending (so the graph is a program of its own) and lifts the size bound.
// Returns the trace's run count, for capture().
uint64_t begin_capture();
// Ends a capture that will not become a CompiledTrace: flushes the graph's ops
// (restoring the bound); `info` tells what ran.
void end_capture(RunInfo& info);

}  // namespace tpu::aten

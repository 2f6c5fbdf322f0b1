// One call of a lowered op, as the generic kernel sees it, and the pieces both
// execution modes share: the argument walk that builds the program key and the
// input list, PyTorch meta-kernel shape inference, and emission of the op into
// a program (a single-op program in Strict Eager, a fused graph in Defer & Fuse).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "aten/op_info.h"
#include "engine/async_errors.h"
#include "engine/program_cache.h"
#include "engine/slot.h"
#include "engine/view_io.h"
#include "lower/registry.h"
#include "pjrt/pjrt.h"

namespace tpu::aten {

class KeySink;  // op_call.cc: writes the program key during walk()

// A program input of one call.
struct Input {
  enum Kind { kSlot, kHost, kRng } kind = kSlot;
  std::shared_ptr<engine::Slot> slot;  // kSlot
  hlo::TensorType type;                // parameter type
  char bytes[16] = {0};                // kHost rank 0 value (a scalar list is one per element); kRng (seed, offset) once drawn
};

// A tensor argument: which input holds its storage and how it views it.
struct TensorRef {
  bool defined = false;
  int input = -1;
  engine::ViewLayout layout;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool host_scalar = false;  // a CPU 0-dim tensor (e.g. a wrapped Python number)
  bool wrapped = false;
};

struct ArgDesc {
  lower::Arg::Kind kind = lower::Arg::kOther;
  TensorRef t;
  std::vector<TensorRef> list;
  int input = -1;  // kScalar / kScalarList
  c10::IValue value;
};

struct OutSpec {
  // kNone: an undefined result (e.g. a gradient output_mask did not ask for).
  enum Kind { kNew, kWrite, kNone } kind = kNew;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // kNew
  std::vector<int64_t> sizes;                          // kNew
  std::vector<int64_t> strides;                        // kNew: empty for row-major
  int input = -1;                                      // kWrite: the slot input rewritten
  hlo::ElemType elem = hlo::ElemType::F32;             // kWrite: element type written
};

// What is known about an op signature (one program key): its results, and the
// compiled single-op program once Strict Eager needed it.
struct Entry {
  std::vector<OutSpec> outs;
  std::vector<int64_t> return_counts;  // per schema return: tensors it carries
  uint64_t rng_numbers = 0;
  std::vector<lower::OutMeta> meta;    // PyTorch's meta results (when it has a meta kernel)
  bool have_meta = false;
  std::string mlir;                    // the single-op program
  // Device-side checks the lowering declared; when any, the program's last
  // output is their s64[2n] flags (engine/device_checks.h).
  std::vector<lower::CheckSpec> checks;
  // Inputs the program overwrites in place (aliased to their written output):
  // donated at launch when nothing but their storage holds the buffer.
  std::vector<int64_t> donatable;
  // Who launches the single-op program (the op's name), made once: a launch
  // copies the pointer, not the name.
  std::shared_ptr<const engine::LaunchOrigin> origin;

  // The single-op program, compiled on first use. Threads running the same op
  // signature at once share one Entry: one compiles while the others wait. The
  // executable is never replaced, so it lives as long as the Entry (which the
  // caller holds).
  const pjrt::Executable& executable(const std::string& what);
  // Whether executable() has compiled (an Entry that Defer & Fuse made for
  // recording has not).
  bool has_executable() const { return ready_.load(std::memory_order_acquire) != nullptr; }

 private:
  std::mutex exe_mu_;
  std::shared_ptr<pjrt::Executable> exe_;
  std::atomic<const pjrt::Executable*> ready_{nullptr};
};

// Everything needed to emit an op later, holding no tensor (so that recording
// an op never keeps an intermediate alive).
struct OpRecord {
  c10::OperatorHandle op;
  OpInfo* info;
  std::vector<ArgDesc> descs;
  std::vector<hlo::TensorType> input_types;
  // XLA precision of float32 dots/convolutions, from torch.set_float32_matmul_precision
  // at the time of the call (part of the key).
  hlo::Precision precision = hlo::Precision::HIGHEST;
};

struct Call {
  const c10::OperatorHandle& op;
  OpInfo& info;
  torch::jit::Stack* stack;
  size_t nargs;
  bool deferred = false;  // pending storages are inputs, not materialised
  // Whether walk() fills `descs` (what emitting the op needs). A Strict Eager call
  // whose program is cached needs only the key and the inputs; it walks again
  // with descriptors on a miss.
  bool want_descs = true;
  int device = -1;
  std::string key;
  hlo::Precision precision = hlo::Precision::HIGHEST;
  bool precision_keyed = false;  // whether walk() read the precision into the key
  std::vector<Input> inputs;
  std::vector<ArgDesc> descs;

  Call(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  c10::IValue& arg(size_t i) { return (*stack)[stack->size() - nargs + i]; }
  // Builds key, inputs and descs.
  void walk();
  OpRecord record() const;
  // The same, moving the descriptors out (the call needs them no more).
  OpRecord take_record();

 private:
  ArgDesc scratch_;  // stands in for descs[i] when descriptors are not wanted
  KeySink* sink_ = nullptr;  // the key being written, during walk()
  // Whether key and inputs borrowed the thread's spare capacity (see the constructor).
  bool borrowed_ = false;
  // Slot -> input, for calls with many inputs (see slot_input).
  std::unordered_map<const engine::Slot*, int> slot_index_;
  bool slot_indexed_ = false;
  int slot_input(const std::shared_ptr<engine::Slot>& slot);
  TensorRef tensor_ref(const at::Tensor& t, size_t i);
  int scalar_input(const c10::Scalar& s);
};

// PyTorch's meta kernel on meta copies of the arguments: result dtypes and
// shapes, and PyTorch's own argument checks. False when the op has none.
bool run_meta(Call& c, std::vector<lower::OutMeta>& out, std::vector<int64_t>& return_counts);
// Resizes out= tensors to the shapes the meta kernel gave; true if any changed.
bool resize_outs(Call& c, const std::vector<lower::OutMeta>& meta);
// Index masks, out= resizing, then the walk: everything before the cache lookup.
void prepare(Call& c);
// The cached Entry of the call's key, or a new one (meta kernel + a trial emission).
std::shared_ptr<Entry> entry_for(Call& c);
// What emitting an op gives: the values, and what it learnt about the op's
// results (entry_for keeps that in the signature's Entry).
struct Emitted {
  // One per OutSpec that is not kNone: new results as rank-1 arrays, then
  // rewritten storages' new contents.
  std::vector<hlo::Value> values;
  std::vector<OutSpec> outs;
  std::vector<int64_t> return_counts;  // only when e had none from the meta kernel
  uint64_t rng_numbers = 0;
  std::vector<lower::CheckSpec> checks;
};
// Emits the op reading input k from `in[k]`. With `checks`, appends the
// device-side checks the lowering declared.
Emitted emit(const OpRecord& r, hlo::Builder& b, const std::vector<hlo::Value>& in,
             const Entry& e, std::vector<lower::Ctx::Check>* checks = nullptr);
// Device-side checks in a program: whether any failed (pred[]), and the flags
// output (s64[2n]: failed, offending value per check).
hlo::Value any_failed(hlo::Builder& b, const std::vector<lower::Ctx::Check>& checks);
hlo::Value check_flags(hlo::Builder& b, const std::vector<lower::Ctx::Check>& checks);
// `written` unless a check failed, then `before`: a failed program leaves the
// storages it would have written as they were. Types must agree (else `written`).
hlo::Value unless_failed(hlo::Builder& b, hlo::Value failed, hlo::Value before, hlo::Value written);
// Draws the RNG state for a kRng input (advancing the generator).
void draw_rng(Call& c, const Entry& e);
// Pops the arguments and pushes the results: `fresh` holds one tensor per
// kNew/kNone OutSpec, in order; aliasing returns push their argument.
void push_results(Call& c, const Entry& e, c10::ArrayRef<at::Tensor> fresh);
std::string describe(Call& c);
// The device buffer of a host value or RNG-state input (scalars cached by value).
std::shared_ptr<pjrt::Buffer> host_input_buffer(const Input& in, int device);

engine::ProgramCache<Entry>& entry_cache();  // of the current checks setting
engine::ProgramCache<Entry>& entry_cache(bool checks);

}  // namespace tpu::aten

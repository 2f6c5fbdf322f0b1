// The host tier: tiny, exact, shape-volatile ops run with PyTorch's CPU kernel
// on host copies of their storages instead of compiling a program.
//
// Compiling a single-op program costs about 0.1 s; one that will never run
// again (a key seen once) is pure loss. generate() grows input_ids and the
// attention mask by one column a token, so its cat, and the column reads of
// their growing storages, have a new program key every token. Moving a few
// hundred bytes to the host and back costs microseconds.
//
// A call qualifies when its program key missed the cache and
//  - it is an ATen op (other libraries' CPU kernels, fbgemm's, need not check their
//    input as the lowering does: a bad id would pass silently);
//  - every tensor it reads or writes is integer or bool (the CPU kernel gives
//    the bits our lowering gives: no rounding differences), no argument is a
//    floating or complex scalar, it draws no random numbers and makes no new
//    view (returns alias only the arguments it writes);
//  - the storages it reads and writes and the results it makes hold at most
//    kHostTierMaxBytes in all;
//  - its shape-free signature (op, dtypes, ranks, structural arguments, not
//    sizes, strides or offsets) has missed the cache before with another key:
//    evidence that its shapes keep changing. A first sighting compiles as
//    always, so ordinary code, and the first sample of every test, still runs
//    the lowering and is cached.
// Anything else, or a CPU kernel that raises or gives a float or larger
// result, leaves the call to the compiled path as before, unchanged.
//
// A key the host keeps running (a fixed shape that keeps missing) is compiled
// once its host time adds up to this process's mean compile time.
//
// A result takes the layout the compiled program would give it (the kernel's
// strides when they are a dense permutation, else row-major; op_emit.cc).
//
// Counted in metrics().host_tier_ops, not with the CPU fallback (an op that
// has no lowering). Strict Eager runs it per call, here. Defer & Fuse never
// runs it at record time (each host op would have to run its pending inputs
// first and cut the fused step in pieces: warm decoding measured 10x slower);
// instead a whole trace whose shapes keep changing runs node by node at its
// flush, its tiny integer nodes on the host under the same conditions
// (trace_by_node.h). Inside a torch.compile capture it would split the graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "aten/op_call.h"

namespace tpu::aten {

// Bytes of storages read and written plus results made: 64 KiB. A generate
// batch of 8 prompts of 1024 int64 tokens is 64 KiB; at that size a transfer
// each way is still tens of microseconds, against ~0.1 s per compile. Larger
// int tensors whose shapes change (rare outside token bookkeeping) compile.
constexpr int64_t kHostTierMaxBytes = int64_t{64} << 10;

// Runs a prepared call (prepare() done, its key missing from the program
// cache) on the host when it qualifies: true when it ran (results pushed,
// written storages updated), false when the caller must compile (nothing
// changed, the arguments are still on the stack).
bool run_on_host_tier(Call& c);

// On by default. Tests of the lowerings turn it off so that every sample,
// whatever its shape, runs the lowering (torch_tpu.debug.host_tier).
void set_host_tier_enabled(bool on);
bool host_tier_enabled();

// Whether a scalar argument (an int, a bool or an integral Scalar) keeps the
// CPU kernel's result bit-identical to our lowering's: no floating value.
bool exact_scalar(const c10::IValue& v);
// The same for each element of a scalar list.
bool exact_scalar_list(const c10::IValue& v);

// What a compile costs: this process's mean so far, 0.1 s before any (about a
// single-op program on the CPU plugin). A key the host keeps running buys its
// program once its host time reaches this.
uint64_t compile_price_ns();

// Shared by the host tier and Defer & Fuse's node-by-node runs (trace_by_node.h):
// A device buffer's `length` elements as a flat CPU tensor of `dtype` (read in
// place where the plugin keeps device memory in host memory).
at::Tensor host_copy(const pjrt::Buffer& buf, c10::ScalarType dtype, int64_t length);
// A dense host tensor's elements as a device buffer, aliasing its memory where the
// plugin can (nobody writes `t` again).
std::shared_ptr<pjrt::Buffer> upload_host(const at::Tensor& t, int device);
// The strides a compiled program gives a new result of these sizes whose
// kernel (meta or CPU) laid it out with `strides` (op_emit.cc, to_meta_layout):
// those strides when they are a dense permutation of another order, else
// empty (row-major).
std::vector<int64_t> result_strides(c10::IntArrayRef sizes, c10::IntArrayRef strides);
// `t` laid out with `strides` (empty: row-major), densely from element 0: its
// data is the storage of a result with that layout.
at::Tensor in_layout(const at::Tensor& t, const std::vector<int64_t>& strides);

// Forgets which signatures have missed (after the program cache is cleared a
// first sighting compiles again).
void clear_host_tier_signatures();

}  // namespace tpu::aten

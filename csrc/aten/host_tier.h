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
// Counted in metrics().host_tier_ops, not with the CPU fallback (an op that
// has no lowering). Strict Eager only: in Defer & Fuse each host op would have
// to run its pending inputs first and cut the fused step in pieces (measured:
// warm decoding 10x slower), and inside a torch.compile capture it would split
// the graph.
#pragma once

#include <cstdint>

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

// Forgets which signatures have missed (after the program cache is cleared a
// first sighting compiles again).
void clear_host_tier_signatures();

}  // namespace tpu::aten

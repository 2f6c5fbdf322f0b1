// Defer & Fuse's answer to shape-volatile traces: run them node by node rather
// than compile a fused program that never runs again.
//
// generate() grows input_ids and the attention mask by one column a token, so
// the pending trace of its eager loop (argmax, cat, the stopping criteria...)
// has a new fused key every token: each flush compiled a fused program used
// once (2 a token). Running the host tier at record time instead would flush
// the volatile op's pending inputs first and cut the fused step in pieces.
//
// So the decision is made at flush time, on the whole trace. It runs node by
// node when its fused key misses the cache and either
//  - its shape-free structure (every node's op, dtypes, ranks, structural
//    arguments and how the nodes connect, not sizes, strides or offsets) has
//    missed before under another key -- evidence that its shapes keep
//    changing, the host tier's rule at the scale of a trace -- or
//  - it is a first sighting, but one of its integer/bool host-exact nodes
//    (below) has been seen before, in any trace, with other sizes (a float
//    copy_ of another size is everyday code, no evidence): generate()'s growing cat ran
//    first in the prefill's trace, so the decoding loop's traces run node by
//    node from their first flush and compile nothing after the second token.
// The nodes run one after the other, each through what Strict Eager would run:
//  - a tiny host-exact node whose single-op program was never compiled runs
//    with PyTorch's CPU kernel on host copies of its input buffers. Host-exact:
//    the host tier's conditions (host_tier.h: integer/bool tensors), or an op
//    that only copies, selects or compares values (copy_, clone, cat, where,
//    argmax/argmin, comparisons) on one floating dtype: no arithmetic, so no
//    rounding to differ (the loop's argmax over the last logits; up to 4 MiB,
//    where integer nodes stop at 64 KiB);
//  - any other node launches its single-op program (compiled once, kept in its
//    Entry: stable-shape nodes hit from then on).
// Nothing is cut: no node's inputs are flushed early, and the trace is one
// flush as before. Only outputs alive at the flush are written back.
//
// Stable-shape code never gets here: a first sighting of a structure with no
// node known to vary, and every later hit, compiles or runs the one fused
// program as always (a training step stays one program). Limits keep a big trace that happens to
// change shape (a last, smaller batch) on the fused path: it runs node by node
// only when at least one of its nodes runs on the host (else its single-op
// programs would change key with it, or the key changed for another reason
// than shapes, such as the matmul precision), and it has at most kMaxNodes
// nodes of which at most kMaxNewPrograms
// would compile a single-op program. A fused key that keeps coming back (a
// fixed shape after all) compiles its fused program once its node-by-node time
// adds up to the mean compile time (host_tier.h's compile_price_ns).
//
// Not for a trace with an in-place write at or after its first device-side
// check: its fused program undoes such writes when the check fails, which one
// node at a time could not (the checks themselves still run node by node and
// raise as in Strict Eager). Not for a torch.compile capture (its trace must become one replayable
// program), nor with the host tier off (torch_tpu.debug.host_tier(False)).
// Counted in deferred stats: traces_run_by_node, and host_tier_ops for the
// nodes the host ran.
#pragma once

#include <string>
#include <vector>

#include "aten/trace.h"

namespace tpu::aten {

constexpr size_t kMaxNodes = 256;
constexpr size_t kMaxNewPrograms = 8;

// Called when trace `g`'s fused key `key` missed the cache: runs it node by
// node (the values of `outputs` fulfilled into their storages) and returns
// true when the rules above say so; false, having run nothing, when the fused
// program must be compiled.
bool run_trace_by_node(Trace& g, const std::string& key, const std::vector<int>& outputs, int device);

// Runs every node of `g` as its single-op program, in order (each waits for its
// program, which may be compiling in the background), and fulfils `outputs`:
// Strict Eager's pipelined traces (Trace::pipelined).
void run_trace_nodes(Trace& g, const std::vector<int>& outputs, int device);

// Forgets which structures have missed (clear_program_cache).
void clear_trace_sightings();

}  // namespace tpu::aten

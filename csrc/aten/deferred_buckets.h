// Defer & Fuse's dynamic buckets: a fused-cache miss of a trace whose sizes keep
// changing is offered to torch_tpu/dynamo/deferred_buckets.py, which runs it as
// the padded program of its size's bucket when the trace verifies against a
// symbolic template learnt from earlier traces of the same structure (see that
// module). The masking itself is the compiled mode's (masked_trace.py): one
// mechanism for both.
#pragma once

#include <c10/util/ArrayRef.h>

#include <memory>
#include <vector>

#include "aten/trace.h"

namespace tpu::aten {

// Called when `g`'s fused key missed the cache (not a compiled graph's capture):
// true when the bucket hook ran the trace and fulfilled `outputs` (trace slots);
// false, having changed nothing, when the trace must run as usual.
bool run_trace_bucketed(Trace& g, const std::vector<int>& outputs, int device);

// While the hook runs, the ops it calls record into a trace of their own (the
// flushing trace's lock is held): this_thread_trace() returns it when set.
const std::shared_ptr<Trace>* side_trace();

// The shape of the tensor a whole-storage upload wrote into `buf` (.to("tpu")):
// a trace that reads an input only flattened ([b * s], as the embedding's
// index_select does) pads it as the [b, s] the user made, not as a guess.
void note_upload_shape(const std::shared_ptr<pjrt::Buffer>& buf, c10::IntArrayRef sizes);

}  // namespace tpu::aten

// Moving a collective's tensors between the tpu device and host memory, and
// turning a c10d reduction into one Gloo can run on host tensors.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/csrc/distributed/c10d/Types.hpp>

namespace tpu::dist {

// Runs pending Defer & Fuse work, so that every tpu tensor a collective reads
// or writes has its value (a collective is a graph boundary on this transport).
void flush_pending_work();

// A contiguous host tensor holding `t`'s values (one device-to-host transfer
// into pooled memory, staging_pool.h).
// A contiguous CPU tensor is returned as is, so Gloo works on it in place.
at::Tensor stage_in(const at::Tensor& t);
// How a message of `numel` elements of `elem` bytes is cut into pieces of about
// `piece_bytes` ({first, count} in elements; one empty piece for no elements).
// A pure function of the size: every rank posts the same collectives, whichever
// path (staged or in place) each takes.
std::vector<std::pair<int64_t, int64_t>> pieces_of(int64_t numel, int64_t elem,
                                                   int64_t piece_bytes);
// stage_in for large messages, in pieces so that the collective overlaps the
// copy: `t`'s values land in `host` (contiguous, t's dtype and numel) piece by
// piece, of about `piece_bytes`, and `ready(first, count)` (in elements) runs as
// each has landed, while the next is still being copied. One piece when the
// platform has no partial copies or `t` is small.
void stage_in_pieces(const at::Tensor& t, const at::Tensor& host, int64_t piece_bytes,
                     const std::function<void(int64_t, int64_t)>& ready);
// An uninitialised contiguous host tensor shaped like `t` (for outputs).
at::Tensor host_like(const at::Tensor& t);
// dst <- host; nothing when they share storage. `host` must not be written
// afterwards: a tpu dst's buffer may alias it (no copy on the CPU plugin).
void stage_out(const at::Tensor& dst, const at::Tensor& host);

// A 1-D uint8 alias of a contiguous host tensor: collectives that only move
// data send bytes, so every dtype works (Gloo lacks int16, uint16/32/64, fp8).
at::Tensor as_bytes(const at::Tensor& host);
// A 2-D uint8 alias [size(0), bytes per row], for splits along dim 0.
at::Tensor as_byte_rows(const at::Tensor& host);

// A reduction as Gloo runs it: in a host dtype Gloo supports, with AVG and
// PREMUL_SUM turned into SUM plus a scale before or a division after, and bool
// reduced as uint8 (SUM and MAX: any; PRODUCT and MIN: all, as NCCL does).
class ReducePlan {
 public:
  ReducePlan(const c10d::ReduceOp& op, at::ScalarType dtype, int world_size,
             const std::string& what);
  // Host copy of `t` ready for Gloo (converted and pre-scaled).
  at::Tensor stage_in(const at::Tensor& t) const;
  // A host output buffer for a result of dtype `dtype` shaped like `t`.
  at::Tensor host_like(const at::Tensor& t) const;
  // Writes the reduced host values into `dst` (post-divided and converted back).
  void stage_out(const at::Tensor& dst, const at::Tensor& host) const;
  c10d::ReduceOp gloo_op() const { return gloo_op_; }
  // Whether Gloo reduces the tensor's own values (no conversion, no
  // pre-scaling), so that they may be staged in pieces.
  bool reduces_in_place() const { return host_dtype_ == dtype_ && !premul_; }
  // After Gloo reduced a tensor's own values in place (reduces_in_place()):
  // AVG's division, done where they lie.
  void finish_in_place(const at::Tensor& host) const;

 private:
  c10d::ReduceOp gloo_op_;
  at::ScalarType dtype_;
  at::ScalarType host_dtype_;
  std::optional<at::Scalar> premul_;
  int64_t divisor_ = 1;
};

}  // namespace tpu::dist

#include "dist/host_staging.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <ATen/ATen.h>

#include "aten/deferred_graph.h"
#include "aten/torch_compat.h"
#include "aten/kernels.h"
#include "aten/tpu_tensor.h"
#include "aten/host_copy.h"
#include "engine/host_alias.h"
#include "dist/staging_pool.h"
#include "dist/phase_probe.h"

namespace tpu::dist {

namespace {

bool on_tpu(const at::Tensor& t) { return t.device().type() == aten::kTpu; }

// The dtype Gloo reduces `dtype` in: its own where it has it, else a wider one.
at::ScalarType reduce_dtype(at::ScalarType dtype, const std::string& what) {
  switch (dtype) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kChar: case at::kByte: case at::kInt: case at::kLong:
      return dtype;
    case at::kBool: return at::kByte;
    case at::kShort: case at::kUInt16: return at::kInt;
    case at::kUInt32: return at::kLong;
    case at::kFloat8_e4m3fn: case at::kFloat8_e5m2: case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
      return at::kFloat;
    default:
      TORCH_CHECK(false, what, ": reductions of ", dtype, " tensors are not supported by the tpu "
                  "process group (complex tensors are reduced by torch.distributed as real views "
                  "for SUM and AVG only)");
  }
}

const char* op_name(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

}  // namespace

void flush_pending_work() { aten::flush_pending("collective"); }

at::Tensor stage_in(const at::Tensor& t) {
  if (!on_tpu(t)) return t.contiguous();
  // Straight into the (pooled) tensor Gloo then works on in place.
  at::Tensor host = pooled_empty(t.sizes(), t.scalar_type());
  PhaseProbe probe("stage_in device to host");
  if (host.numel() > 0) {
    std::shared_ptr<pjrt::Buffer> buf = aten::dense_buffer_for_host_read(t);
    pjrt::HostView view = engine::readable_host_view(*buf, host.nbytes());
    if (view.data != nullptr) {
      // One memcpy on this thread instead of the plugin's transfer.
      std::memcpy(host.data_ptr(), view.data, host.nbytes());
      return host;
    }
  }
  aten::to_host_into(t, host);
  return host;
}

std::vector<std::pair<int64_t, int64_t>> pieces_of(int64_t numel, int64_t elem,
                                                   int64_t piece_bytes) {
  int64_t per_piece = std::max<int64_t>(1, piece_bytes / elem);
  std::vector<std::pair<int64_t, int64_t>> pieces;  // first, count
  for (int64_t first = 0; first < numel; first += per_piece)
    pieces.emplace_back(first, std::min(per_piece, numel - first));
  if (pieces.empty()) pieces.emplace_back(0, 0);
  return pieces;
}

void stage_in_pieces(const at::Tensor& t, const at::Tensor& host, int64_t piece_bytes,
                     const std::function<void(int64_t, int64_t)>& ready) {
  // The pieces depend on the size alone, so every rank posts the same
  // collectives whatever its tensor's device or platform.
  int64_t elem = static_cast<int64_t>(t.element_size());
  std::vector<std::pair<int64_t, int64_t>> pieces = pieces_of(t.numel(), elem, piece_bytes);
  auto whole = [&] {
    if (on_tpu(t)) aten::to_host_into(t, host);
    else host.copy_(t);
    for (auto [first, count] : pieces) ready(first, count);
  };
  if (!on_tpu(t) || pieces.size() == 1) return whole();
  std::shared_ptr<pjrt::Buffer> buf = aten::dense_buffer_for_host_read(t);
  // Partial copies of a buffer whose program still runs are not safe on every
  // plugin (the CPU one crashed): the whole value is waited for first.
  buf->await_ready();
  auto* dst = static_cast<char*>(host.data_ptr());
  // Every piece is asked for at once: the CPU plugin copies on its own thread
  // (the call returns in microseconds), so the copies run back to back while
  // this thread hands each landed piece to Gloo. (One piece in flight at a
  // time measured slower: a wake-up per piece between copies.) PJRT's partial
  // copies, not readable_host_view's memcpy on this thread, which competed
  // with Gloo's threads and measured slower at 64 MB on a loaded host.
  std::vector<std::unique_ptr<pjrt::Event>> copies;
  for (auto [first, count] : pieces) {
    auto ev = engine::download_part(*buf, dst + first * elem, first * elem, count * elem);
    if (!ev) {  // no partial copies on this platform
      for (auto& c : copies) c->await();
      return whole();
    }
    copies.push_back(std::move(ev));
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    {
      PhaseProbe probe("stage_in piece device to host");
      copies[i]->await();
    }
    ready(pieces[i].first, pieces[i].second);
  }
}

at::Tensor host_like(const at::Tensor& t) {
  if (!on_tpu(t) && t.is_contiguous()) return t;
  return pooled_empty(t.sizes(), t.scalar_type());
}

void stage_out(const at::Tensor& dst, const at::Tensor& host) {
  if (dst.numel() == 0) return;
  if (!on_tpu(dst)) {
    if (!dst.is_alias_of(host)) dst.copy_(host);
    return;
  }
  // The staged values are not touched again: the device buffer may alias them.
  aten::adopt_host_values(dst, host);
}

at::Tensor as_bytes(const at::Tensor& host) {
  return host.reshape({-1}).view(at::kByte);
}

at::Tensor as_byte_rows(const at::Tensor& host) {
  int64_t rows = host.dim() == 0 ? 1 : host.size(0);
  if (host.numel() == 0) return at::empty({rows, 0}, host.options().dtype(at::kByte));
  return host.reshape({rows, -1}).view(at::kByte);
}

ReducePlan::ReducePlan(const c10d::ReduceOp& op, at::ScalarType dtype, int world_size,
                       const std::string& what)
    : gloo_op_(c10d::ReduceOp::SUM), dtype_(dtype), host_dtype_(reduce_dtype(dtype, what)) {
  bool is_bool = dtype == at::kBool;
  bool is_float = at::isFloatingType(dtype);
  auto unsupported = [&](const char* why) {
    TORCH_CHECK(false, what, ": ReduceOp.", op_name(op.op_), " is not supported for ", dtype,
                " tensors (", why, ")");
  };
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      gloo_op_ = is_bool ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
      break;
    case c10d::ReduceOp::AVG:
      if (is_bool) unsupported("the mean of booleans is not a boolean");
      // Integers divide with truncation, as NCCL's AVG does.
      divisor_ = world_size;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      if (!is_float) unsupported("the factor is a floating-point number");
      auto* s = dynamic_cast<tpu::compat::PreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s, what, ": ReduceOp.PREMUL_SUM without its factor");
      premul_ = s->tensor_factor.defined() ? s->tensor_factor.cpu().item()
                                           : at::Scalar(s->double_factor);
      break;
    }
    case c10d::ReduceOp::PRODUCT:
      gloo_op_ = is_bool ? c10d::ReduceOp::MIN : c10d::ReduceOp::PRODUCT;
      break;
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      gloo_op_ = op.op_;
      break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      if (is_float) unsupported("bitwise reductions need integer or bool tensors");
      gloo_op_ = op.op_;
      break;
    default:
      unsupported("unknown reduction");
  }
}

at::Tensor ReducePlan::stage_in(const at::Tensor& t) const {
  at::Tensor host = dist::stage_in(t);
  if (host.scalar_type() != host_dtype_) host = host.to(host_dtype_);
  if (premul_) {
    // Scaling a CPU tensor the user passed must not change it.
    if (host.is_alias_of(t)) host = host.clone();
    host.mul_(*premul_);
  }
  return host;
}

at::Tensor ReducePlan::host_like(const at::Tensor& t) const {
  return pooled_empty(t.sizes(), host_dtype_);
}

void ReducePlan::finish_in_place(const at::Tensor& host) const {
  if (divisor_ == 1) return;
  at::Tensor h = host;
  if (at::isFloatingType(host_dtype_)) {
    h.div_(divisor_);
  } else {
    h.div_(divisor_, "trunc");
  }
}

void ReducePlan::stage_out(const at::Tensor& dst, const at::Tensor& host) const {
  at::Tensor v = host;
  if (divisor_ != 1) {
    if (at::isFloatingType(host_dtype_)) {
      v = v.div(divisor_);
    } else {
      v = v.div(divisor_, "trunc");
    }
  }
  if (dtype_ == at::kBool) v = v.ne(0);
  else if (v.scalar_type() != dtype_) v = v.to(dtype_);
  dist::stage_out(dst, v);
}

}  // namespace tpu::dist

#include "dist/host_staged_transport.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>

#include <ATen/ATen.h>

#include "aten/torch_compat.h"
#include "core/settings.h"
#include "dist/host_staging.h"
#include "dist/in_place_reduce.h"
#include "dist/phase_probe.h"
#include "dist/staged_work.h"
#include "dist/staging_pool.h"

namespace tpu::dist {

namespace {

using c10d::OpType;

c10::IValue list_of(const TensorList& ts) { return c10::IValue(ts); }

c10::IValue lists_of(const TensorLists& tss) {
  c10::List<c10::List<at::Tensor>> out;
  for (const auto& ts : tss) out.push_back(c10::List<at::Tensor>(ts));
  return c10::IValue(out);
}

TensorList flat(const TensorLists& tss) {
  TensorList out;
  for (const auto& ts : tss) out.insert(out.end(), ts.begin(), ts.end());
  return out;
}

// Host copies of `ts` as bytes (data movement only).
TensorList bytes_in(const TensorList& ts, TensorList& hosts) {
  TensorList bytes;
  for (const auto& t : ts) {
    hosts.push_back(stage_in(t));
    bytes.push_back(as_bytes(hosts.back()));
  }
  return bytes;
}

// Host output buffers for `ts` as bytes.
TensorList bytes_out(const TensorList& ts, TensorList& hosts) {
  TensorList bytes;
  for (const auto& t : ts) {
    hosts.push_back(host_like(t));
    bytes.push_back(as_bytes(hosts.back()));
  }
  return bytes;
}

void all_out(const TensorList& dst, const TensorList& hosts) {
  for (size_t i = 0; i < dst.size(); ++i) stage_out(dst[i], hosts[i]);
}

// Large allreduces go to Gloo in pieces of 4 MB from 8 MB on, so that copying
// one piece to the host overlaps Gloo's reduction of the one before. (Pieces
// from 4 MB, of 1 MB, were measured slower at 4 MB on a loaded 2-core host:
// each Gloo call costs a hand-off to its worker thread.) A pure function of
// the size, so every rank posts the same collectives.
// TORCH_TPU_DIST_PIECE_MB sets the piece size instead (pieces from twice it;
// 0: no pieces).
int64_t piece_bytes(int64_t nbytes) {
  static const double fixed_mb = [] {
    double mb = settings::number("TORCH_TPU_DIST_PIECE_MB");  // NaN: unset
    return std::isnan(mb) ? -1.0 : mb;
  }();
  constexpr int64_t kMB = 1 << 20;
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max() / 4;
  if (fixed_mb == 0) return kNone;
  if (fixed_mb > 0) {
    int64_t piece = static_cast<int64_t>(fixed_mb * kMB);
    return nbytes >= 2 * piece ? piece : kNone;
  }
  return nbytes >= 8 * kMB ? 4 * kMB : kNone;
}

class HostStagedTransport final : public Transport {
 public:
  HostStagedTransport(c10::intrusive_ptr<c10d::Backend> gloo, std::string group)
      : gloo_(std::move(gloo)), group_(std::move(group)) {}

  std::string name() const override { return "host-staged (gloo)"; }
  void set_group(const std::string& group) override { group_ = group; }

  std::string what(const char* op) const { return std::string(op) + " on group '" + group_ + "'"; }

  WorkPtr collective(WorkPtr inner, OpType type, const char* op, TensorList outputs,
                     StagedWork::Finish finish) {
    return StagedWork::collective({std::move(inner)}, type, what(op), std::move(outputs),
                                  std::move(finish));
  }

  WorkPtr broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) override {
    flush_pending_work();
    bool root = gloo_->getRank() == opts.rootRank;
    TensorList hosts;
    TensorList bytes = root ? bytes_in(tensors, hosts) : bytes_out(tensors, hosts);
    auto inner = gloo_->broadcast(bytes, opts);
    TensorList ts = tensors;
    return collective(inner, OpType::BROADCAST, "broadcast", ts, [ts, hosts, root] {
      if (!root) all_out(ts, hosts);
      return list_of(ts);
    });
  }

  WorkPtr allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) override {
    return reduce_like(tensors, opts, false, "allreduce");
  }

  WorkPtr allreduce_coalesced(TensorList& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    return reduce_like(tensors, opts, true, "allreduce_coalesced");
  }

  WorkPtr reduce_like(TensorList& tensors, const c10d::AllreduceOptions& opts, bool coalesced,
                      const char* op) {
    TORCH_CHECK(!tensors.empty(), what(op), ": no tensors");
    std::vector<ReducePlan> plans;
    for (const auto& t : tensors)
      plans.emplace_back(opts.reduceOp, t.scalar_type(), gloo_->getSize(), what(op));
    auto issued = std::chrono::steady_clock::now();
    {
      PhaseProbe probe("allreduce 1 flush");
      flush_pending_work();
    }
    PhaseProbe stage_probe("allreduce 2 stage in + post");
    TensorList hosts;
    std::vector<WorkPtr> inner;
    int64_t piece = piece_bytes(static_cast<int64_t>(tensors[0].nbytes()));
    // One tensor whose own values Gloo reduces: in place where it lies, or staged
    // in pieces when large. Both post the same collectives, one per piece of
    // pieces_of (a pure function of the size; one piece below the piece size),
    // because ranks may choose differently (one finds its tensor shared,
    // another not) and must still post matching collectives.
    const bool one_tensor = !coalesced && tensors.size() == 1 && plans[0].reduces_in_place();
    c10d::AllreduceOptions o = opts;
    o.reduceOp = plans[0].gloo_op();
    auto post_piece = [&](const at::Tensor& flat, int64_t first, int64_t count) {
      TensorList part{flat.narrow(0, first, count)};
      inner.push_back(gloo_->allreduce(part, o));
    };
    if (one_tensor) {
      // Where the device memory is host memory: Gloo reduces the tensor's own
      // buffer (in_place_reduce.h says when that is safe), no copies.
      if (std::optional<InPlaceHost> here = in_place_host(tensors[0])) {
        at::Tensor flat = here->host.view({-1});
        for (auto [first, count] :
             pieces_of(flat.numel(), static_cast<int64_t>(flat.element_size()), piece))
          post_piece(flat, first, count);
        TensorList ts = tensors;
        // The closure holds the external reference; StagedWork drops it once
        // the finish ran (or the collective failed).
        return StagedWork::collective(
            inner, OpType::ALLREDUCE, what(op), ts,
            [ts, host = here->host, hold = here->hold, plan = plans[0], issued] {
              if (profiling()) record_phase("allreduce 3 call to done", issued);
              plan.finish_in_place(host);
              return list_of(ts);
            });
      }
    }
    if (one_tensor && static_cast<int64_t>(tensors[0].nbytes()) > piece) {
      // Large: Gloo reduces each piece while the next one is still being
      // copied to the host.
      at::Tensor host = pooled_empty(tensors[0].sizes(), tensors[0].scalar_type());
      at::Tensor flat = host.view({-1});
      stage_in_pieces(tensors[0], host, piece,
                      [&](int64_t first, int64_t count) { post_piece(flat, first, count); });
      hosts.push_back(host);
    } else if (coalesced) {
      for (size_t i = 0; i < tensors.size(); ++i) hosts.push_back(plans[i].stage_in(tensors[i]));
      // Gloo coalesces tensors of one dtype only: one call per dtype.
      std::vector<at::ScalarType> order;
      std::map<at::ScalarType, std::pair<TensorList, size_t>> by_dtype;  // hosts, a plan
      for (size_t i = 0; i < hosts.size(); ++i) {
        auto dt = tensors[i].scalar_type();
        if (!by_dtype.count(dt)) {
          order.push_back(dt);
          by_dtype[dt].second = i;
        }
        by_dtype[dt].first.push_back(hosts[i]);
      }
      for (auto dt : order) {
        c10d::AllreduceCoalescedOptions o;
        o.reduceOp = plans[by_dtype[dt].second].gloo_op();
        o.timeout = opts.timeout;
        inner.push_back(gloo_->allreduce_coalesced(by_dtype[dt].first, o));
      }
    } else {
      for (size_t i = 0; i < tensors.size(); ++i) hosts.push_back(plans[i].stage_in(tensors[i]));
      inner.push_back(gloo_->allreduce(hosts, o));
    }
    TensorList ts = tensors;
    return StagedWork::collective(inner, coalesced ? OpType::ALLREDUCE_COALESCED : OpType::ALLREDUCE,
                      what(op), ts, [ts, hosts, plans, issued] {
                        if (profiling()) record_phase("allreduce 3 call to done", issued);
                        PhaseProbe probe("allreduce 4 stage out");
                        for (size_t i = 0; i < ts.size(); ++i) plans[i].stage_out(ts[i], hosts[i]);
                        return list_of(ts);
                      });
  }

  WorkPtr reduce(TensorList& tensors, const c10d::ReduceOptions& opts) override {
    TORCH_CHECK(tensors.size() == 1, what("reduce"), ": expects one tensor");
    ReducePlan plan(opts.reduceOp, tensors[0].scalar_type(), gloo_->getSize(), what("reduce"));
    flush_pending_work();
    TensorList hosts{plan.stage_in(tensors[0])};
    c10d::ReduceOptions o = opts;
    o.reduceOp = plan.gloo_op();
    auto inner = gloo_->reduce(hosts, o);
    bool root = gloo_->getRank() == opts.rootRank;
    TensorList ts = tensors;
    return collective(inner, OpType::REDUCE, "reduce", ts, [ts, hosts, plan, root] {
      if (root) plan.stage_out(ts[0], hosts[0]);
      return list_of(ts);
    });
  }

  WorkPtr allgather(TensorLists& outputs, TensorList& inputs,
                    const c10d::AllgatherOptions& opts) override {
    return gather_lists(outputs, inputs, OpType::ALLGATHER, "allgather",
                        [&](TensorLists& o, TensorList& i) { return gloo_->allgather(o, i, opts); });
  }

  WorkPtr allgather_coalesced(TensorLists& outputs, TensorList& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return gather_lists(outputs, inputs, OpType::ALLGATHER_COALESCED, "allgather_coalesced",
                        [&](TensorLists& o, TensorList& i) {
                          return gloo_->allgather_coalesced(o, i, opts);
                        });
  }

  // Every rank's inputs into per-rank output lists (allgather, allgather_coalesced,
  // gather): the inputs staged to host bytes, `call` runs the Gloo collective on
  // them, the outputs copied back once it completes.
  template <typename Call>
  WorkPtr gather_lists(TensorLists& outputs, TensorList& inputs, OpType type, const char* op,
                       Call call) {
    flush_pending_work();
    TensorList in_hosts, out_hosts;
    TensorList in_bytes = bytes_in(inputs, in_hosts);
    TensorLists out_bytes;
    for (auto& list : outputs) out_bytes.push_back(bytes_out(list, out_hosts));
    auto inner = call(out_bytes, in_bytes);
    TensorLists outs = outputs;
    return collective(inner, type, op, flat(outs), [outs, out_hosts, in_hosts] {
      all_out(flat(outs), out_hosts);
      return lists_of(outs);
    });
  }

  WorkPtr allgather_base(at::Tensor& output, at::Tensor& input,
                         const c10d::AllgatherOptions& opts) override {
    TensorList outs{output}, ins{input};
    return gather_tensors(outs, ins, opts, OpType::_ALLGATHER_BASE, "allgather_into_tensor");
  }

  WorkPtr allgather_into_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    return gather_tensors(outputs, inputs, opts, OpType::COALESCED,
                          "allgather_into_tensor_coalesced");
  }

  WorkPtr gather_tensors(TensorList& outputs, TensorList& inputs,
                         const c10d::AllgatherOptions& opts, OpType type, const char* op) {
    TORCH_CHECK(outputs.size() == inputs.size(), what(op), ": ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i)
      TORCH_CHECK(outputs[i].numel() == inputs[i].numel() * gloo_->getSize(), what(op),
                  ": the output must have world size (", gloo_->getSize(),
                  ") times the input's elements, got ", outputs[i].numel(), " for ",
                  inputs[i].numel());
    flush_pending_work();
    TensorList in_hosts, out_hosts;
    TensorList in_bytes = bytes_in(inputs, in_hosts);
    TensorList out_bytes = bytes_out(outputs, out_hosts);
    WorkPtr inner;
    if (type == OpType::_ALLGATHER_BASE)
      inner = gloo_->_allgather_base(out_bytes[0], in_bytes[0], opts);
    else
      inner = gloo_->allgather_into_tensor_coalesced(out_bytes, in_bytes, opts);
    TensorList outs = outputs;
    return collective(inner, type, op, outs, [outs, out_hosts, in_hosts] {
      all_out(outs, out_hosts);
      return list_of(outs);
    });
  }

  WorkPtr gather(TensorLists& outputs, TensorList& inputs,
                 const c10d::GatherOptions& opts) override {
    return gather_lists(outputs, inputs, OpType::GATHER, "gather",
                        [&](TensorLists& o, TensorList& i) { return gloo_->gather(o, i, opts); });
  }

  WorkPtr scatter(TensorList& outputs, TensorLists& inputs,
                  const c10d::ScatterOptions& opts) override {
    flush_pending_work();
    TensorList in_hosts, out_hosts;
    TensorLists in_bytes;
    for (auto& list : inputs) in_bytes.push_back(bytes_in(list, in_hosts));
    TensorList out_bytes = bytes_out(outputs, out_hosts);
    auto inner = gloo_->scatter(out_bytes, in_bytes, opts);
    TensorList outs = outputs;
    return collective(inner, OpType::SCATTER, "scatter", outs, [outs, out_hosts, in_hosts] {
      all_out(outs, out_hosts);
      return list_of(outs);
    });
  }

  WorkPtr reduce_scatter(TensorList& outputs, TensorLists& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1, what("reduce_scatter"),
                ": expects one output and one input list");
    ReducePlan plan(opts.reduceOp, outputs[0].scalar_type(), gloo_->getSize(),
                    what("reduce_scatter"));
    flush_pending_work();
    TensorLists in_hosts(1);
    for (const auto& t : inputs[0]) in_hosts[0].push_back(plan.stage_in(t));
    TensorList out_hosts{plan.host_like(outputs[0])};
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = plan.gloo_op();
    auto inner = gloo_->reduce_scatter(out_hosts, in_hosts, o);
    TensorList outs = outputs;
    return collective(inner, OpType::REDUCE_SCATTER, "reduce_scatter", outs,
                      [outs, out_hosts, in_hosts, plan] {
                        plan.stage_out(outs[0], out_hosts[0]);
                        return list_of(outs);
                      });
  }

  WorkPtr reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                              const c10d::ReduceScatterOptions& opts) override {
    TensorList outs{output}, ins{input};
    return scatter_tensors(outs, ins, opts, OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor");
  }

  WorkPtr reduce_scatter_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return scatter_tensors(outputs, inputs, opts, tpu::compat::kReduceScatterTensorCoalesced,
                           "reduce_scatter_tensor_coalesced");
  }

  WorkPtr scatter_tensors(TensorList& outputs, TensorList& inputs,
                          const c10d::ReduceScatterOptions& opts, OpType type, const char* op) {
    TORCH_CHECK(outputs.size() == inputs.size(), what(op), ": ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    std::vector<ReducePlan> plans;
    for (size_t i = 0; i < inputs.size(); ++i) {
      TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * gloo_->getSize(), what(op),
                  ": the input must have world size (", gloo_->getSize(),
                  ") times the output's elements, got ", inputs[i].numel(), " for ",
                  outputs[i].numel());
      plans.emplace_back(opts.reduceOp, inputs[i].scalar_type(), gloo_->getSize(), what(op));
    }
    flush_pending_work();
    TensorList in_hosts, out_hosts;
    for (size_t i = 0; i < inputs.size(); ++i) {
      in_hosts.push_back(plans[i].stage_in(inputs[i]));
      out_hosts.push_back(plans[i].host_like(outputs[i]));
    }
    c10d::ReduceScatterOptions o = opts;
    o.reduceOp = plans[0].gloo_op();
    WorkPtr inner;
    if (type == OpType::_REDUCE_SCATTER_BASE) {
      inner = gloo_->_reduce_scatter_base(out_hosts[0], in_hosts[0], o);
    } else {
      inner = gloo_->reduce_scatter_tensor_coalesced(out_hosts, in_hosts, o);
    }
    TensorList outs = outputs;
    return collective(inner, type, op, outs, [outs, out_hosts, in_hosts, plans] {
      for (size_t i = 0; i < outs.size(); ++i) plans[i].stage_out(outs[i], out_hosts[i]);
      return list_of(outs);
    });
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override {
    flush_pending_work();
    at::Tensor in_host = stage_in(input);
    at::Tensor out_host = host_like(output);
    // Rows along dim 0 keep the split sizes valid for the byte views.
    at::Tensor in_bytes = as_byte_rows(in_host);
    at::Tensor out_bytes = as_byte_rows(out_host);
    auto inner = gloo_->alltoall_base(out_bytes, in_bytes, output_splits, input_splits, opts);
    TensorList outs{output};
    return collective(inner, OpType::ALLTOALL_BASE, "all_to_all_single", outs,
                      [outs, out_host, in_host] {
                        stage_out(outs[0], out_host);
                        return list_of(outs);
                      });
  }

  WorkPtr alltoall(TensorList& outputs, TensorList& inputs,
                   const c10d::AllToAllOptions& opts) override {
    flush_pending_work();
    TensorList in_hosts, out_hosts;
    TensorList in_bytes = bytes_in(inputs, in_hosts);
    TensorList out_bytes = bytes_out(outputs, out_hosts);
    auto inner = gloo_->alltoall(out_bytes, in_bytes, opts);
    TensorList outs = outputs;
    return collective(inner, OpType::ALLTOALL, "all_to_all", outs, [outs, out_hosts, in_hosts] {
      all_out(outs, out_hosts);
      return list_of(outs);
    });
  }

  WorkPtr send(TensorList& tensors, int dst, int tag) override {
    flush_pending_work();
    TensorList hosts;
    TensorList bytes = bytes_in(tensors, hosts);
    auto inner = gloo_->send(bytes, dst, tag);
    return StagedWork::point_to_point(inner, OpType::SEND, what("send"), tensors,
                                      [hosts, bytes] { return c10::IValue(); });
  }

  WorkPtr recv(TensorList& tensors, int src, int tag) override {
    return recv_into(tensors, tag, [&](TensorList& bytes) { return gloo_->recv(bytes, src, tag); },
                     OpType::RECV);
  }

  WorkPtr recv_anysource(TensorList& tensors, int tag) override {
    return recv_into(tensors, tag, [&](TensorList& bytes) {
      return gloo_->recvAnysource(bytes, tag);
    }, OpType::RECVANYSOURCE);
  }

  template <typename Post>
  WorkPtr recv_into(TensorList& tensors, int tag, Post post, OpType type) {
    // The destination's pending writes run first, so that none lands after the copy back.
    flush_pending_work();
    TensorList hosts;
    TensorList bytes = bytes_out(tensors, hosts);
    auto inner = post(bytes);
    TensorList ts = tensors;
    return StagedWork::point_to_point(inner, type, what("recv"), ts, [ts, hosts] {
      all_out(ts, hosts);
      return list_of(ts);
    });
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    // Work already launched on the device is not waited for (as with NCCL), but
    // pending Defer & Fuse work is launched, so that its errors surface here.
    flush_pending_work();
    c10d::BarrierOptions o = opts;
    o.device = std::nullopt;
    o.device_ids.clear();
    auto inner = gloo_->barrier(o);
    return collective(inner, OpType::BARRIER, "barrier", {}, [] { return c10::IValue(TensorList{}); });
  }

  void monitored_barrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    gloo_->monitoredBarrier(opts, wait_all_ranks);
  }

  void set_timeout(std::chrono::milliseconds timeout) override { gloo_->setTimeout(timeout); }
  void set_sequence_number_for_group() override { gloo_->setSequenceNumberForGroup(); }
  uint64_t get_sequence_number_for_group() override {
    return gloo_->getSequenceNumberForGroup();
  }

 private:
  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::string group_;
};

}  // namespace

std::unique_ptr<Transport> make_host_staged_transport(c10::intrusive_ptr<c10d::Backend> gloo,
                                                      std::string group) {
  return std::make_unique<HostStagedTransport>(std::move(gloo), std::move(group));
}

}  // namespace tpu::dist

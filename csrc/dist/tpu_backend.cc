#include "dist/tpu_backend.h"

#include <ATen/ATen.h>
#include <ATen/ThreadLocalPythonObjects.h>

#include "aten/tpu_tensor.h"

namespace tpu::dist {

namespace {

// Every tensor of a collective: dense, on a tpu device (CPU tensors are
// accepted too: they skip the staging) and, within one call, on one device.
void check_tensors(const TensorList& ts, const char* op) {
  std::optional<c10::Device> device;
  for (const auto& t : ts) {
    TORCH_CHECK(t.defined(), "tpu process group: ", op, ": undefined tensor");
    TORCH_CHECK(t.layout() == c10::kStrided, "tpu process group: ", op,
                ": only dense (strided) tensors are supported, got ", t.layout());
    TORCH_CHECK(t.device().type() == aten::kTpu || t.device().is_cpu(), "tpu process group: ", op,
                ": expected tpu tensors, got a tensor on ", t.device());
    if (t.device().type() != aten::kTpu) continue;
    TORCH_CHECK(!device || *device == t.device(), "tpu process group: ", op,
                ": tensors on different devices (", *device, " and ", t.device(), ")");
    device = t.device();
  }
}

void check_same_dtype(const TensorList& ts, at::ScalarType dtype, const char* op) {
  for (const auto& t : ts)
    TORCH_CHECK(t.scalar_type() == dtype, "tpu process group: ", op,
                ": tensors must all have dtype ", dtype, ", got ", t.scalar_type());
}

TensorList flat(const TensorLists& tss) {
  TensorList out;
  for (const auto& ts : tss) out.insert(out.end(), ts.begin(), ts.end());
  return out;
}

// Each collective is posted with the thread's stashed Python objects set aside.
// The work it posts captures the poster's at::ThreadLocalState (Gloo's work, and
// the completion callback StagedWork adds to its future) and is freed on Gloo's
// worker thread. torch.autograd stashes the caller's contextvars context among
// those objects for every backward, so a collective posted during one (DDP's
// gradient allreduces) carried a Python object into Gloo's thread, and freeing it
// there takes the GIL: a deadlock when the group is destroyed under the GIL (its
// destructor joins that thread; DDP's Reducer freed by Python), an abort during
// interpreter exit. The collective needs none of them. (A Python dispatch mode
// active around a collective is still captured: the CPU ops run under it.)
class PythonObjectsSetAside {
 public:
  PythonObjectsSetAside() : saved_(at::impl::ThreadLocalPythonObjects::get_state()) {
    at::impl::ThreadLocalPythonObjects::set_state({});
  }
  ~PythonObjectsSetAside() { at::impl::ThreadLocalPythonObjects::set_state(std::move(saved_)); }
  PythonObjectsSetAside(const PythonObjectsSetAside&) = delete;
  PythonObjectsSetAside& operator=(const PythonObjectsSetAside&) = delete;

 private:
  at::impl::ThreadLocalPythonObjects saved_;
};

void check_peer(int peer, int size, const char* op) {
  TORCH_CHECK(peer >= 0 && peer < size, "tpu process group: ", op, ": rank ", peer,
              " is not in a group of ", size);
}

}  // namespace

TpuBackend::TpuBackend(int rank, int size, std::unique_ptr<Transport> transport,
                       std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size), transport_(std::move(transport)), timeout_(timeout) {
  init();
}

c10::intrusive_ptr<c10d::Backend::Options> TpuBackend::getBackendOptions() {
  auto o = c10::make_intrusive<Options>("tpu", timeout_);
  o->group_name = getGroupUid();
  o->group_desc = getGroupDesc();
  return o;
}

void TpuBackend::setGroupUid(const std::string& pg_uid) {
  c10d::Backend::setGroupUid(pg_uid);
  transport_->set_group(pg_uid);
}

void TpuBackend::setTimeout(std::chrono::milliseconds timeout) {
  timeout_ = timeout;
  transport_->set_timeout(timeout);
}

WorkPtr TpuBackend::broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(tensors, "broadcast");
  check_peer(static_cast<int>(opts.rootRank), getSize(), "broadcast");
  return transport_->broadcast(tensors, opts);
}

WorkPtr TpuBackend::allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(tensors, "allreduce");
  TORCH_CHECK(!tensors.empty(), "tpu process group: allreduce: no tensors");
  check_same_dtype(tensors, tensors[0].scalar_type(), "allreduce");
  TORCH_CHECK(!opts.sparseIndices, "tpu process group: sparse allreduce is not supported");
  return transport_->allreduce(tensors, opts);
}

WorkPtr TpuBackend::allreduce_coalesced(TensorList& tensors,
                                        const c10d::AllreduceCoalescedOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(tensors, "allreduce_coalesced");
  return transport_->allreduce_coalesced(tensors, opts);
}

WorkPtr TpuBackend::reduce(TensorList& tensors, const c10d::ReduceOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(tensors, "reduce");
  check_peer(static_cast<int>(opts.rootRank), getSize(), "reduce");
  return transport_->reduce(tensors, opts);
}

WorkPtr TpuBackend::allgather(TensorLists& outputs, TensorList& inputs,
                              const c10d::AllgatherOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(inputs, "allgather");
  check_tensors(flat(outputs), "allgather");
  TORCH_CHECK(outputs.size() == inputs.size(), "tpu process group: allgather: ", outputs.size(),
              " output lists for ", inputs.size(), " inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(static_cast<int>(outputs[i].size()) == getSize(),
                "tpu process group: allgather: the output list must hold one tensor per rank (",
                getSize(), "), got ", outputs[i].size());
    for (const auto& o : outputs[i])
      TORCH_CHECK(o.scalar_type() == inputs[i].scalar_type() && o.numel() == inputs[i].numel(),
                  "tpu process group: allgather: output tensors must match the input (",
                  inputs[i].scalar_type(), ", ", inputs[i].numel(), " elements), got ",
                  o.scalar_type(), " with ", o.numel());
  }
  return transport_->allgather(outputs, inputs, opts);
}

WorkPtr TpuBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                    const c10d::AllgatherOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors({output, input}, "allgather_into_tensor");
  check_same_dtype({output}, input.scalar_type(), "allgather_into_tensor");
  return transport_->allgather_base(output, input, opts);
}

WorkPtr TpuBackend::allgather_coalesced(TensorLists& outputs, TensorList& inputs,
                                        const c10d::AllgatherOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(inputs, "allgather_coalesced");
  check_tensors(flat(outputs), "allgather_coalesced");
  return transport_->allgather_coalesced(outputs, inputs, opts);
}

WorkPtr TpuBackend::allgather_into_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                    const c10d::AllgatherOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(inputs, "allgather_into_tensor_coalesced");
  check_tensors(outputs, "allgather_into_tensor_coalesced");
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i)
    check_same_dtype({outputs[i]}, inputs[i].scalar_type(), "allgather_into_tensor_coalesced");
  return transport_->allgather_into_tensor_coalesced(outputs, inputs, opts);
}

WorkPtr TpuBackend::gather(TensorLists& outputs, TensorList& inputs,
                           const c10d::GatherOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(inputs, "gather");
  check_tensors(flat(outputs), "gather");
  check_peer(static_cast<int>(opts.rootRank), getSize(), "gather");
  return transport_->gather(outputs, inputs, opts);
}

WorkPtr TpuBackend::scatter(TensorList& outputs, TensorLists& inputs,
                            const c10d::ScatterOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(outputs, "scatter");
  check_tensors(flat(inputs), "scatter");
  check_peer(static_cast<int>(opts.rootRank), getSize(), "scatter");
  return transport_->scatter(outputs, inputs, opts);
}

WorkPtr TpuBackend::reduce_scatter(TensorList& outputs, TensorLists& inputs,
                                   const c10d::ReduceScatterOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(outputs, "reduce_scatter");
  check_tensors(flat(inputs), "reduce_scatter");
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1 &&
                  static_cast<int>(inputs[0].size()) == getSize(),
              "tpu process group: reduce_scatter: expects one output and one input per rank");
  check_same_dtype(inputs[0], outputs[0].scalar_type(), "reduce_scatter");
  return transport_->reduce_scatter(outputs, inputs, opts);
}

WorkPtr TpuBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                         const c10d::ReduceScatterOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors({output, input}, "reduce_scatter_tensor");
  check_same_dtype({output}, input.scalar_type(), "reduce_scatter_tensor");
  return transport_->reduce_scatter_base(output, input, opts);
}

WorkPtr TpuBackend::reduce_scatter_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                    const c10d::ReduceScatterOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(outputs, "reduce_scatter_tensor_coalesced");
  check_tensors(inputs, "reduce_scatter_tensor_coalesced");
  for (size_t i = 0; i < inputs.size() && i < outputs.size(); ++i)
    check_same_dtype({outputs[i]}, inputs[i].scalar_type(), "reduce_scatter_tensor_coalesced");
  return transport_->reduce_scatter_tensor_coalesced(outputs, inputs, opts);
}

WorkPtr TpuBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                  std::vector<int64_t>& output_splits,
                                  std::vector<int64_t>& input_splits,
                                  const c10d::AllToAllOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors({output, input}, "all_to_all_single");
  check_same_dtype({output}, input.scalar_type(), "all_to_all_single");
  return transport_->alltoall_base(output, input, output_splits, input_splits, opts);
}

WorkPtr TpuBackend::alltoall(TensorList& outputs, TensorList& inputs,
                             const c10d::AllToAllOptions& opts) {
  PythonObjectsSetAside aside;
  check_tensors(outputs, "all_to_all");
  check_tensors(inputs, "all_to_all");
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize() &&
                  static_cast<int>(inputs.size()) == getSize(),
              "tpu process group: all_to_all: expects one input and one output per rank (",
              getSize(), ")");
  return transport_->alltoall(outputs, inputs, opts);
}

WorkPtr TpuBackend::send(TensorList& tensors, int dst, int tag) {
  PythonObjectsSetAside aside;
  check_tensors(tensors, "send");
  check_peer(dst, getSize(), "send");
  return transport_->send(tensors, dst, tag);
}

WorkPtr TpuBackend::recv(TensorList& tensors, int src, int tag) {
  PythonObjectsSetAside aside;
  check_tensors(tensors, "recv");
  check_peer(src, getSize(), "recv");
  return transport_->recv(tensors, src, tag);
}

WorkPtr TpuBackend::recvAnysource(TensorList& tensors, int tag) {
  PythonObjectsSetAside aside;
  check_tensors(tensors, "recv");
  return transport_->recv_anysource(tensors, tag);
}

WorkPtr TpuBackend::barrier(const c10d::BarrierOptions& opts) {
  PythonObjectsSetAside aside;
  return transport_->barrier(opts);
}

void TpuBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  PythonObjectsSetAside aside;
  transport_->monitored_barrier(opts, wait_all_ranks);
}

void TpuBackend::setSequenceNumberForGroup() { transport_->set_sequence_number_for_group(); }

uint64_t TpuBackend::getSequenceNumberForGroup() {
  return transport_->get_sequence_number_for_group();
}

}  // namespace tpu::dist

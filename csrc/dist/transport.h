// How a tpu collective moves its data. TpuBackend (the c10d::Backend users
// reach through torch.distributed) checks arguments and hands every collective
// to one Transport, so platforms can differ in how bytes travel:
//   - HostStagedTransport (host_staged_transport.cc): flush pending work, copy
//     to the host, run the collective through PyTorch's Gloo, copy back. The
//     CPU plugin needs it (it has no cross-process collectives) and it works
//     across hosts wherever a TCPStore rendezvous does.
//   - an in-program transport (StableHLO collectives with replica groups) for
//     PJRT clients that address every device of the job would implement the
//     same interface.
// Signatures mirror c10d::Backend's collectives one to one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace tpu::dist {

using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using TensorList = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  // The group's name, for error messages (known after construction).
  virtual void set_group(const std::string& group) = 0;

  virtual WorkPtr broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) = 0;
  virtual WorkPtr allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) = 0;
  virtual WorkPtr allreduce_coalesced(TensorList& tensors,
                                      const c10d::AllreduceCoalescedOptions& opts) = 0;
  virtual WorkPtr reduce(TensorList& tensors, const c10d::ReduceOptions& opts) = 0;
  virtual WorkPtr allgather(TensorLists& outputs, TensorList& inputs,
                            const c10d::AllgatherOptions& opts) = 0;
  virtual WorkPtr allgather_base(at::Tensor& output, at::Tensor& input,
                                 const c10d::AllgatherOptions& opts) = 0;
  virtual WorkPtr allgather_coalesced(TensorLists& outputs, TensorList& inputs,
                                      const c10d::AllgatherOptions& opts) = 0;
  virtual WorkPtr allgather_into_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                  const c10d::AllgatherOptions& opts) = 0;
  virtual WorkPtr gather(TensorLists& outputs, TensorList& inputs,
                         const c10d::GatherOptions& opts) = 0;
  virtual WorkPtr scatter(TensorList& outputs, TensorLists& inputs,
                          const c10d::ScatterOptions& opts) = 0;
  virtual WorkPtr reduce_scatter(TensorList& outputs, TensorLists& inputs,
                                 const c10d::ReduceScatterOptions& opts) = 0;
  virtual WorkPtr reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                      const c10d::ReduceScatterOptions& opts) = 0;
  virtual WorkPtr reduce_scatter_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                                  const c10d::ReduceScatterOptions& opts) = 0;
  virtual WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input,
                                std::vector<int64_t>& output_splits,
                                std::vector<int64_t>& input_splits,
                                const c10d::AllToAllOptions& opts) = 0;
  virtual WorkPtr alltoall(TensorList& outputs, TensorList& inputs,
                           const c10d::AllToAllOptions& opts) = 0;
  virtual WorkPtr send(TensorList& tensors, int dst, int tag) = 0;
  virtual WorkPtr recv(TensorList& tensors, int src, int tag) = 0;
  virtual WorkPtr recv_anysource(TensorList& tensors, int tag) = 0;
  virtual WorkPtr barrier(const c10d::BarrierOptions& opts) = 0;
  virtual void monitored_barrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) = 0;

  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  virtual void set_sequence_number_for_group() = 0;
  virtual uint64_t get_sequence_number_for_group() = 0;
};

}  // namespace tpu::dist

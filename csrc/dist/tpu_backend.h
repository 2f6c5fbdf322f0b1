// The `tpu` c10d backend (alias `tpu_dist`): what torch.distributed calls for
// tpu tensors. It checks each collective's arguments and hands it to its
// Transport (transport.h), which moves the data.
#pragma once

#include "dist/transport.h"

namespace tpu::dist {

class TpuBackend final : public c10d::Backend {
 public:
  TpuBackend(int rank, int size, std::unique_ptr<Transport> transport,
             std::chrono::milliseconds timeout);

  const std::string getBackendName() const override { return "tpu"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setGroupUid(const std::string& pg_uid) override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  std::string transport_name() const { return transport_->name(); }

  WorkPtr broadcast(TensorList& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(TensorList& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(TensorList& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(TensorList& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(TensorLists& outputs, TensorList& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_coalesced(TensorLists& outputs, TensorList& inputs,
                              const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_into_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                          const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(TensorLists& outputs, TensorList& inputs,
                 const c10d::GatherOptions& opts) override;
  WorkPtr scatter(TensorList& outputs, TensorLists& inputs,
                  const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(TensorList& outputs, TensorLists& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  WorkPtr reduce_scatter_tensor_coalesced(TensorList& outputs, TensorList& inputs,
                                          const c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits,
                        const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(TensorList& outputs, TensorList& inputs,
                   const c10d::AllToAllOptions& opts) override;
  WorkPtr send(TensorList& tensors, int dst, int tag) override;
  WorkPtr recv(TensorList& tensors, int src, int tag) override;
  WorkPtr recvAnysource(TensorList& tensors, int tag) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

 private:
  std::unique_ptr<Transport> transport_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tpu::dist

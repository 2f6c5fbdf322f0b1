// The Work a host-staged collective returns: it completes when the transport's
// own work has completed *and* the results have been copied back into the tpu
// tensors. Collectives complete through their Future (DDP and comm hooks wait
// on it, and callbacks chained with .then() see the tpu tensors); the copy back
// runs on the transport's completion thread, in Strict Eager so that it lands
// at once. (Gloo works without a Future, e.g. reduce_scatter's, get a waiter
// thread that completes ours.) Point-to-point ops (Gloo's send/recv have no Future) complete in
// wait(), on the waiting thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <torch/csrc/distributed/c10d/Work.hpp>

namespace tpu::dist {

class StagedWork : public c10d::Work {
 public:
  // Copies the host results into the tpu tensors; returns the Future's value.
  using Finish = std::function<c10::IValue()>;

  // `inner` is the transport's work on the host tensors; `what` names the
  // collective and group in errors; `outputs` are what result() returns.
  // Several inner works (one per dtype, say) complete as one: `finish` runs
  // once all of them have.
  static c10::intrusive_ptr<StagedWork> collective(std::vector<c10::intrusive_ptr<c10d::Work>> inner,
                                                   c10d::OpType type, std::string what,
                                                   std::vector<at::Tensor> outputs, Finish finish);
  static c10::intrusive_ptr<StagedWork> point_to_point(c10::intrusive_ptr<c10d::Work> inner,
                                                       c10d::OpType type, std::string what,
                                                       std::vector<at::Tensor> outputs,
                                                       Finish finish);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override;

  struct State;
  StagedWork(std::vector<c10::intrusive_ptr<c10d::Work>> inner, c10d::OpType type,
             std::shared_ptr<State> state, bool p2p);

 private:
  std::vector<c10::intrusive_ptr<c10d::Work>> inner_;
  std::shared_ptr<State> state_;
  bool p2p_;
};

// An already completed Work (for collectives with nothing to move).
c10::intrusive_ptr<c10d::Work> completed_work(c10d::OpType type, std::vector<at::Tensor> outputs);

}  // namespace tpu::dist

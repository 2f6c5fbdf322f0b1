#include "dist/staged_work.h"

#include <atomic>
#include <mutex>
#include <thread>

#include <c10/util/Exception.h>

#include "dist/phase_probe.h"
#include "engine/execution_mode.h"

namespace tpu::dist {

struct StagedWork::State {
  std::string what;
  std::vector<at::Tensor> outputs;
  Finish finish;
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::mutex mu;  // point-to-point: wait() may be called from several threads
  bool finished = false;
  std::atomic<size_t> remaining{0};  // collectives: inner works not yet complete
};

namespace {

c10::TypePtr future_type() { return c10::AnyType::get(); }

// The transport's error with the collective and group named, as the
// DistBackendError torch.distributed raises for backend failures.
std::exception_ptr with_context(const std::string& what, std::exception_ptr e) {
  std::string msg;
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    msg = err.what_without_backtrace();
  } catch (const std::exception& err) {
    msg = err.what();
  } catch (...) {
    msg = "unknown error";
  }
  if (msg.rfind("tpu process group", 0) == 0) return e;  // already described
  std::string full = "tpu process group: " + what + " failed: " + msg +
                     "\n(another rank may have failed, exited or timed out; its own error "
                     "names the cause)";
  try {
    C10_THROW_ERROR(DistBackendError, full);
  } catch (...) {
    return std::current_exception();
  }
}

// Copy-backs run in Strict Eager: on the transport's thread, a recorded copy
// would wait in the pending graph for someone to read it.
class StrictEagerScope {
 public:
  StrictEagerScope() : prev_(engine::thread_override()) {
    engine::set_thread_override(static_cast<int>(engine::Mode::kStrictEager));
  }
  ~StrictEagerScope() { engine::set_thread_override(prev_); }

 private:
  int prev_;
};

void run_finish(StagedWork::State& st) {
  try {
    StrictEagerScope eager;
    c10::IValue value = st.finish();
    st.finish = nullptr;  // drop the host buffers
    st.future->markCompleted(std::move(value));
  } catch (...) {
    st.future->setErrorIfNeeded(with_context(st.what, std::current_exception()));
  }
}

}  // namespace

StagedWork::StagedWork(std::vector<c10::intrusive_ptr<c10d::Work>> inner, c10d::OpType type,
                       std::shared_ptr<State> state, bool p2p)
    : c10d::Work(-1, type), inner_(std::move(inner)), state_(std::move(state)), p2p_(p2p) {}

namespace {

// One inner work done (`err` set if it failed); the last one runs the copy back.
void inner_done(const std::shared_ptr<StagedWork::State>& st, std::exception_ptr err) {
  if (err) {
    st->future->setErrorIfNeeded(with_context(st->what, err));
  }
  if (--st->remaining == 0) {
    if (st->future->completed()) {
      st->finish = nullptr;
    } else {
      run_finish(*st);
    }
  }
}

}  // namespace

c10::intrusive_ptr<StagedWork> StagedWork::collective(
    std::vector<c10::intrusive_ptr<c10d::Work>> inner, c10d::OpType type, std::string what,
    std::vector<at::Tensor> outputs, Finish finish) {
  auto st = std::make_shared<State>();
  st->what = std::move(what);
  st->outputs = std::move(outputs);
  st->finish = std::move(finish);
  st->future = c10::make_intrusive<c10::ivalue::Future>(future_type());
  st->remaining = inner.size() + 1;  // +1: held until every callback is attached
  auto work = c10::make_intrusive<StagedWork>(inner, type, st, false);
  // The callbacks hold the state, not the Work: a Work nobody waits for still
  // completes (its tensors get their values) and is then freed.
  for (const auto& w : inner) {
    c10::intrusive_ptr<c10::ivalue::Future> f;
    try {
      f = w->getFuture();
    } catch (const c10::Error&) {
      f.reset();
    }
    if (f) {
      f->addCallback([st](c10::ivalue::Future& done) {
        inner_done(st, done.hasError() ? done.exception_ptr() : nullptr);
      });
    } else {
      std::thread([st, w] {
        try {
          w->wait();
          inner_done(st, nullptr);
        } catch (...) {
          inner_done(st, std::current_exception());
        }
      }).detach();
    }
  }
  inner_done(st, nullptr);
  return work;
}

c10::intrusive_ptr<StagedWork> StagedWork::point_to_point(c10::intrusive_ptr<c10d::Work> inner,
                                                          c10d::OpType type, std::string what,
                                                          std::vector<at::Tensor> outputs,
                                                          Finish finish) {
  auto st = std::make_shared<State>();
  st->what = std::move(what);
  st->outputs = std::move(outputs);
  st->finish = std::move(finish);
  st->future = c10::make_intrusive<c10::ivalue::Future>(future_type());
  return c10::make_intrusive<StagedWork>(std::vector<c10::intrusive_ptr<c10d::Work>>{inner}, type,
                                         st, true);
}

bool StagedWork::isCompleted() {
  if (p2p_) {
    std::lock_guard<std::mutex> g(state_->mu);
    return state_->finished;
  }
  return state_->future->completed();
}

bool StagedWork::isSuccess() const {
  return state_->future->completed() && !state_->future->hasError();
}

std::exception_ptr StagedWork::exception() const {
  return state_->future->completed() ? state_->future->exception_ptr() : nullptr;
}

int StagedWork::sourceRank() const { return inner_.at(0)->sourceRank(); }

std::vector<at::Tensor> StagedWork::result() { return state_->outputs; }

bool StagedWork::wait(std::chrono::milliseconds timeout) {
  PhaseProbe probe(p2p_ ? "p2p wait" : "collective wait");
  if (p2p_) {
    std::lock_guard<std::mutex> g(state_->mu);
    if (!state_->finished) {
      try {
        inner_.at(0)->wait(timeout);
      } catch (...) {
        state_->finished = true;
        state_->finish = nullptr;
        state_->future->setErrorIfNeeded(with_context(state_->what, std::current_exception()));
        std::rethrow_exception(state_->future->exception_ptr());
      }
      run_finish(*state_);
      state_->finished = true;
    }
  } else {
    for (const auto& w : inner_) {
      try {
        // Gloo's wait enforces the timeout and raises the transport's error.
        w->wait(timeout);
      } catch (...) {
        state_->future->setErrorIfNeeded(with_context(state_->what, std::current_exception()));
      }
    }
    state_->future->wait();  // the copy back runs right after the transport's work
  }
  if (state_->future->hasError()) std::rethrow_exception(state_->future->exception_ptr());
  return true;
}

void StagedWork::abort() {
  for (const auto& w : inner_) w->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> StagedWork::getFuture() {
  TORCH_CHECK(!p2p_, "tpu process group: ", state_->what,
              " has no Future (send and recv complete in wait(), as with Gloo)");
  return state_->future;
}

uint64_t StagedWork::getSequencenumber() const { return inner_.at(0)->getSequencenumber(); }

namespace {

class CompletedWork : public c10d::Work {
 public:
  CompletedWork(c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(-1, type), outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(future_type())) {
    future_->markCompleted(c10::IValue(outputs_));
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  std::vector<at::Tensor> result() override { return outputs_; }
  bool wait(std::chrono::milliseconds) override { return true; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> completed_work(c10d::OpType type, std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<CompletedWork>(type, std::move(outputs));
}

}  // namespace tpu::dist

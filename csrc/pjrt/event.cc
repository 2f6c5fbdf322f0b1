// PJRT_Event wrapper: completion (and failure) of asynchronous device work.
#include "pjrt/internal.h"

namespace tpu::pjrt {

Event::Event(std::shared_ptr<const Client> client, PJRT_Event* ev)
    : client_(std::move(client)), ev_(ev) {}

Event::Event(std::string failure) : ev_(nullptr), failure_(std::move(failure)) {}

Event::~Event() {
  if (ev_ == nullptr || client_->api()->PJRT_Event_Destroy == nullptr) return;
  TPU_PJRT_ARGS(PJRT_Event_Destroy_Args, args);
  args.event = ev_;
  detail::destroy_error(client_->api(), client_->api()->PJRT_Event_Destroy(&args));
}

bool Event::is_ready() const {
  if (ev_ == nullptr) return true;  // nothing to wait for
  TPU_PJRT_ARGS(PJRT_Event_IsReady_Args, args);
  args.event = ev_;
  TPU_PJRT_CALL(client_->api(), PJRT_Event_IsReady, args, "PJRT_Event_IsReady");
  return args.is_ready;
}

void Event::await() const {
  if (!failure_.empty()) throw Error(PJRT_Error_Code_INTERNAL, failure_);
  if (ev_ == nullptr) return;
  TPU_PJRT_ARGS(PJRT_Event_Await_Args, args);
  args.event = ev_;
  // The returned error is the failure of the work the event tracks (e.g. a
  // runtime error inside an asynchronously launched program).
  TPU_PJRT_CALL(client_->api(), PJRT_Event_Await, args, "asynchronous device work failed");
}

std::string Event::error_message() const {
  if (!failure_.empty()) return failure_;
  if (ev_ == nullptr || client_->api()->PJRT_Event_Error == nullptr) return "";
  TPU_PJRT_ARGS(PJRT_Event_Error_Args, args);
  args.event = ev_;
  try {
    check(client_->api(), client_->api()->PJRT_Event_Error(&args), "");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

namespace {
struct ReadyCall {
  const PJRT_Api* api;
  std::function<void()> fn;
};

void call_ready(PJRT_Error* error, void* arg) {
  auto* call = static_cast<ReadyCall*>(arg);
  if (error != nullptr) detail::destroy_error(call->api, error);
  call->fn();
  delete call;
}
}  // namespace

void Event::on_ready(std::function<void()> fn) const {
  if (ev_ == nullptr || client_->api()->PJRT_Event_OnReady == nullptr) {
    if (ev_ != nullptr) await();
    fn();
    return;
  }
  auto* call = new ReadyCall{client_->api(), std::move(fn)};
  TPU_PJRT_ARGS(PJRT_Event_OnReady_Args, args);
  args.event = ev_;
  args.callback = &call_ready;
  args.user_arg = call;
  PJRT_Error* err = client_->api()->PJRT_Event_OnReady(&args);
  if (err != nullptr) {
    delete call;
    check(client_->api(), err, "PJRT_Event_OnReady");
  }
}

}  // namespace tpu::pjrt

// PJRT_Error -> tpu::pjrt::Error conversion.
#include "pjrt/internal.h"

namespace tpu::pjrt {

namespace detail {

void destroy_error(const PJRT_Api* api, PJRT_Error* err) noexcept {
  if (err == nullptr || api == nullptr || api->PJRT_Error_Destroy == nullptr) return;
  TPU_PJRT_ARGS(PJRT_Error_Destroy_Args, args);
  args.error = err;
  api->PJRT_Error_Destroy(&args);
}

}  // namespace detail

void check(const PJRT_Api* api, PJRT_Error* err, const std::string& context) {
  if (err == nullptr) return;
  int code = PJRT_Error_Code_UNKNOWN;
  std::string message = "(no message)";
  if (api->PJRT_Error_GetCode != nullptr) {
    TPU_PJRT_ARGS(PJRT_Error_GetCode_Args, code_args);
    code_args.error = err;
    // GetCode itself returns an error only on misuse; ignore it and keep UNKNOWN.
    PJRT_Error* code_err = api->PJRT_Error_GetCode(&code_args);
    if (code_err == nullptr) {
      code = code_args.code;
    } else {
      detail::destroy_error(api, code_err);
    }
  }
  if (api->PJRT_Error_Message != nullptr) {
    TPU_PJRT_ARGS(PJRT_Error_Message_Args, msg_args);
    msg_args.error = err;
    api->PJRT_Error_Message(&msg_args);
    // The message lives only as long as `err`: copy before destroying it.
    if (msg_args.message != nullptr) message.assign(msg_args.message, msg_args.message_size);
  }
  detail::destroy_error(api, err);
  throw Error(code, context.empty() ? message : context + ": " + message);
}

}  // namespace tpu::pjrt

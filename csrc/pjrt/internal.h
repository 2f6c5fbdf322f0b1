// Helpers shared by the csrc/pjrt sources only (not part of the public face).
#pragma once

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace tpu::pjrt::detail {

// Every PJRT argument struct starts with struct_size + extension_start and must
// have all other inputs defined; zero-filling first means a field we do not set
// is a null pointer / zero count rather than stack garbage.
template <typename Args>
Args make_args(size_t struct_size) {
  Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = struct_size;
  args.extension_start = nullptr;
  return args;
}

// Plugins may leave optional entries null (or be older than our header); a
// clear exception beats calling through a null pointer.
template <typename Fn>
Fn* require_fn(Fn* fn, const char* name) {
  if (fn == nullptr) {
    throw Error(PJRT_Error_Code_UNIMPLEMENTED,
                std::string("PJRT plugin does not implement ") + name);
  }
  return fn;
}

// Frees a PJRT_Error without throwing: used on cleanup paths.
void destroy_error(const PJRT_Api* api, PJRT_Error* err) noexcept;

// A dense, major-to-minor upload of host data to `device` with the given
// semantics (copy during the call, or alias the host memory): the one
// PJRT_Client_BufferFromHostBuffer call behind Client::buffer_from_host and
// buffer_from_host_zero_copy. `done_with_host` gets the plugin's event saying
// when `data` is free again (null when it already is).
std::shared_ptr<Buffer> upload_host_buffer(const Client& client, const void* data,
                                           PJRT_Buffer_Type type, const std::vector<int64_t>& dims,
                                           int device, PJRT_HostBufferSemantics semantics,
                                           PJRT_Event** done_with_host);

}  // namespace tpu::pjrt::detail

// Declares `args` of PJRT type `Type` with struct_size set and the rest zeroed.
#define TPU_PJRT_ARGS(Type, name) \
  Type name = ::tpu::pjrt::detail::make_args<Type>(Type##_STRUCT_SIZE)

// Calls api->Fn(&args) and throws Error("<context>: <message>") on failure.
// `context` is evaluated only on failure: per-launch calls (execute, ready
// events) would otherwise build a heap string every time.
#define TPU_PJRT_CALL(api, Fn, args, context)                                        \
  do {                                                                               \
    if (PJRT_Error* tpu_pjrt_err_ =                                                  \
            ::tpu::pjrt::detail::require_fn((api)->Fn, #Fn)(&(args)))                \
      ::tpu::pjrt::check((api), tpu_pjrt_err_, (context));                           \
  } while (0)

// Registering an XLA FFI handler with a plugin through PJRT's FFI extension.
//
// The plugin's pjrt_c_api.h names the extension (PJRT_Extension_Type_FFI) but
// its arguments live in XLA's pjrt_c_api_ffi_extension.h, which the wheels do
// not ship. The layout below is the one of the extension's third entry,
// register_handler (extension struct of 48 bytes: base + three entries); the
// plugin checks the argument struct is at least kRegisterArgsSize bytes.
#include "pjrt/ffi_handler.h"

#include <cstddef>
#include <cstdint>

#include "pjrt/internal.h"

namespace tpu::pjrt {
namespace {

struct FfiExtension {
  PJRT_Extension_Base base;
  void* type_id_register;
  void* user_data_add;
  PJRT_Error* (*register_handler)(void* args);
};

struct RegisterHandlerArgs {
  size_t struct_size;
  const char* target_name;
  size_t target_name_size;
  void* handler;  // XLA_FFI_Handler*: typed (api_version 4) custom calls only
  const char* platform_name;
  size_t platform_name_size;
  uint32_t traits;
};
constexpr size_t kRegisterArgsSize = offsetof(RegisterHandlerArgs, traits) + sizeof(uint32_t);

const FfiExtension* find_ffi(const PJRT_Api* api) {
  for (const PJRT_Extension_Base* e = api->extension_start; e != nullptr; e = e->next)
    if (e->type == PJRT_Extension_Type_FFI)
      return e->struct_size >= sizeof(FfiExtension) ? reinterpret_cast<const FfiExtension*>(e)
                                                     : nullptr;
  return nullptr;
}

}  // namespace

bool register_ffi_handler(const PJRT_Api* api, const std::string& target, void* handler,
                          const std::string& platform) {
  const FfiExtension* ffi = find_ffi(api);
  if (ffi == nullptr || ffi->register_handler == nullptr) return false;
  RegisterHandlerArgs args{};
  args.struct_size = kRegisterArgsSize;
  args.target_name = target.data();
  args.target_name_size = target.size();
  args.handler = handler;
  args.platform_name = platform.data();
  args.platform_name_size = platform.size();
  check(api, ffi->register_handler(&args), "PJRT_FFI_Register_Handler(" + target + ")");
  return true;
}

}  // namespace tpu::pjrt

// XLA FFI handlers registered with a plugin (PJRT's FFI extension).
#pragma once

#include <string>

#include "pjrt_c_api.h"

namespace tpu::pjrt {

// Registers `handler` (an XLA_FFI_Handler*) as the typed custom call `target` of
// `platform` ("Host" for XLA:CPU), for the programs compiled after it. False when
// the plugin has no FFI extension; throws Error when the plugin refuses it.
bool register_ffi_handler(const PJRT_Api* api, const std::string& target, void* handler,
                          const std::string& platform);

}  // namespace tpu::pjrt

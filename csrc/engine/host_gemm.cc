#include "engine/host_gemm.h"

#include "core/settings.h"
#include "hlo/host_gemm.h"
#include "pjrt/ffi_handler.h"

#ifdef TPU_HAVE_XLA_FFI
#include <ATen/CPUFunctions.h>
#include <ATen/ATen.h>

#include "xla/ffi/api/c_api.h"
#endif

namespace tpu::engine {
namespace {

#ifdef TPU_HAVE_XLA_FFI

XLA_FFI_Error* ffi_error(const XLA_FFI_Api* api, const char* message) {
  XLA_FFI_Error_Create_Args a{};
  a.struct_size = XLA_FFI_Error_Create_Args_STRUCT_SIZE;
  a.message = message;
  a.errc = XLA_FFI_Error_Code_INVALID_ARGUMENT;
  return api->XLA_FFI_Error_Create(&a);
}

at::Tensor wrap(const XLA_FFI_Buffer* b) {
  return at::from_blob(b->data, at::IntArrayRef(b->dims, static_cast<size_t>(b->rank)),
                       at::TensorOptions().dtype(at::kFloat));
}

// out = op(a) @ op(b), op a transpose of the last two dims where TA / TB; the
// buffers are dense row-major (XLA's default layout for custom-call operands).
template <bool TA, bool TB>
XLA_FFI_Error* gemm(XLA_FFI_CallFrame* call) {
  // XLA asks a handler's metadata (the FFI version it was built for) before
  // running it: answer with the plugin's own version, whose calls we use.
  for (XLA_FFI_Extension_Base* e = call->extension_start; e != nullptr; e = e->next) {
    if (e->type != XLA_FFI_Extension_Metadata) continue;
    XLA_FFI_Metadata* m = reinterpret_cast<XLA_FFI_Metadata_Extension*>(e)->metadata;
    m->api_version.major_version = call->api->api_version.major_version;
    m->api_version.minor_version = call->api->api_version.minor_version;
    m->traits = 0;
    return nullptr;
  }
  if (call->stage != XLA_FFI_ExecutionStage_EXECUTE) return nullptr;
  if (call->args.size != 2 || call->rets.size != 1 ||
      call->args.types[0] != XLA_FFI_ArgType_BUFFER ||
      call->args.types[1] != XLA_FFI_ArgType_BUFFER ||
      call->rets.types[0] != XLA_FFI_RetType_BUFFER)
    return ffi_error(call->api, "torch_tpu.gemm: expects two buffers and one result");
  auto* a = static_cast<XLA_FFI_Buffer*>(call->args.args[0]);
  auto* b = static_cast<XLA_FFI_Buffer*>(call->args.args[1]);
  auto* c = static_cast<XLA_FFI_Buffer*>(call->rets.rets[0]);
  if (a->dtype != XLA_FFI_DataType_F32 || b->dtype != XLA_FFI_DataType_F32 ||
      c->dtype != XLA_FFI_DataType_F32 || a->rank != b->rank || a->rank != c->rank ||
      (a->rank != 2 && a->rank != 3))
    return ffi_error(call->api, "torch_tpu.gemm: expects float32 operands of rank 2 or 3");
  at::Tensor ta = wrap(a), tb = wrap(b), tc = wrap(c);
  if (TA) ta = ta.transpose(-2, -1);
  if (TB) tb = tb.transpose(-2, -1);
  // The CPU kernels directly (no dispatcher): this runs on the plugin's threads,
  // where no mode or dispatch key of the caller's thread must apply.
  if (a->rank == 2)
    at::cpu::mm_out(tc, ta, tb);
  else
    at::cpu::bmm_out(tc, ta, tb);
  return nullptr;
}

#endif  // TPU_HAVE_XLA_FFI

}  // namespace

bool register_host_gemm(const PJRT_Api* api) {
#ifdef TPU_HAVE_XLA_FFI
  if (!tpu::settings::flag("TORCH_TPU_CPU_HOST_GEMM")) return false;
  struct Target {
    const char* name;
    XLA_FFI_Handler* fn;
  };
  const Target targets[] = {{"torch_tpu.gemm_nn", &gemm<false, false>},
                            {"torch_tpu.gemm_nt", &gemm<false, true>},
                            {"torch_tpu.gemm_tn", &gemm<true, false>},
                            {"torch_tpu.gemm_tt", &gemm<true, true>}};
  for (const Target& t : targets)
    if (!pjrt::register_ffi_handler(api, t.name, reinterpret_cast<void*>(t.fn), "Host"))
      return false;
  hlo::set_host_gemm(true);
  return true;
#else
  return false;
#endif
}

bool host_gemm_enabled() { return hlo::host_gemm(); }

}  // namespace tpu::engine

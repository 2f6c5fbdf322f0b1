// See pjrt_runner.h. Error handling is minimal on purpose: any PJRT error is
// turned into its message and the test that asked fails with it.
#include "pjrt_runner.h"

#include <dlfcn.h>

#include "pjrt_c_api.h"

namespace hlo_test {
namespace {

const PJRT_Api* A(const void* p) { return static_cast<const PJRT_Api*>(p); }

// Takes ownership of `e`; returns its message ("" for no error).
std::string take(const PJRT_Api* api, PJRT_Error* e) {
  if (!e) return "";
  PJRT_Error_Message_Args m{};
  m.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  m.error = e;
  api->PJRT_Error_Message(&m);
  std::string msg(m.message, m.message_size);
  PJRT_Error_Destroy_Args d{};
  d.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  d.error = e;
  api->PJRT_Error_Destroy(&d);
  return msg.empty() ? "unknown PJRT error" : msg;
}

std::string await_and_destroy(const PJRT_Api* api, PJRT_Event* ev) {
  if (!ev) return "";
  PJRT_Event_Await_Args a{};
  a.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  a.event = ev;
  std::string err = take(api, api->PJRT_Event_Await(&a));
  PJRT_Event_Destroy_Args d{};
  d.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  d.event = ev;
  take(api, api->PJRT_Event_Destroy(&d));
  return err;
}

void destroy_buffer(const PJRT_Api* api, PJRT_Buffer* b) {
  if (!b) return;
  PJRT_Buffer_Destroy_Args d{};
  d.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  d.buffer = b;
  take(api, api->PJRT_Buffer_Destroy(&d));
}

PJRT_Buffer_Type buffer_type(tpu::hlo::ElemType t) {
  using E = tpu::hlo::ElemType;
  switch (t) {
    case E::PRED: return PJRT_Buffer_Type_PRED;
    case E::S8: return PJRT_Buffer_Type_S8;
    case E::S16: return PJRT_Buffer_Type_S16;
    case E::S32: return PJRT_Buffer_Type_S32;
    case E::S64: return PJRT_Buffer_Type_S64;
    case E::U8: return PJRT_Buffer_Type_U8;
    case E::U16: return PJRT_Buffer_Type_U16;
    case E::U32: return PJRT_Buffer_Type_U32;
    case E::U64: return PJRT_Buffer_Type_U64;
    case E::F16: return PJRT_Buffer_Type_F16;
    case E::BF16: return PJRT_Buffer_Type_BF16;
    case E::F32: return PJRT_Buffer_Type_F32;
    case E::F64: return PJRT_Buffer_Type_F64;
    case E::C64: return PJRT_Buffer_Type_C64;
    case E::C128: return PJRT_Buffer_Type_C128;
    case E::F8E4M3FN: return PJRT_Buffer_Type_F8E4M3FN;
    case E::F8E5M2: return PJRT_Buffer_Type_F8E5M2;
    case E::F8E4M3FNUZ: return PJRT_Buffer_Type_F8E4M3FNUZ;
    case E::F8E5M2FNUZ: return PJRT_Buffer_Type_F8E5M2FNUZ;
  }
  return PJRT_Buffer_Type_INVALID;
}

// CompileOptionsProto{executable_build_options{num_replicas: 1, num_partitions: 1}}.
const char kCompileOptions[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};

}  // namespace

std::string Runner::open(const std::string& plugin_path) {
  void* lib = dlopen(plugin_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return std::string("dlopen: ") + dlerror();
  using GetApi = const PJRT_Api* (*)();
  auto get = reinterpret_cast<GetApi>(dlsym(lib, "GetPjrtApi"));
  if (!get) return "plugin has no GetPjrtApi";
  const PJRT_Api* api = get();
  api_ = api;
  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  std::string err = take(api, api->PJRT_Plugin_Initialize(&init));
  if (!err.empty()) return "initialize: " + err;
  PJRT_Client_Create_Args cc{};
  cc.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  err = take(api, api->PJRT_Client_Create(&cc));
  if (!err.empty()) return "client: " + err;
  client_ = cc.client;
  PJRT_Client_AddressableDevices_Args ad{};
  ad.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  ad.client = cc.client;
  err = take(api, api->PJRT_Client_AddressableDevices(&ad));
  if (!err.empty()) return "devices: " + err;
  if (ad.num_addressable_devices == 0) return "no addressable devices";
  device_ = ad.addressable_devices[0];
  return "";
}

static std::string compile_impl(const PJRT_Api* api, PJRT_Client* client, const std::string& mlir,
                                PJRT_LoadedExecutable** exe) {
  PJRT_Program prog{};
  prog.struct_size = PJRT_Program_STRUCT_SIZE;
  prog.code = const_cast<char*>(mlir.data());
  prog.code_size = mlir.size();
  prog.format = "mlir";
  prog.format_size = 4;
  PJRT_Client_Compile_Args c{};
  c.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  c.client = client;
  c.program = &prog;
  c.compile_options = kCompileOptions;
  c.compile_options_size = sizeof kCompileOptions;
  std::string err = take(api, api->PJRT_Client_Compile(&c));
  *exe = c.executable;
  return err;
}

static void destroy_exe(const PJRT_Api* api, PJRT_LoadedExecutable* exe) {
  if (!exe) return;
  PJRT_LoadedExecutable_Destroy_Args d{};
  d.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  d.executable = exe;
  take(api, api->PJRT_LoadedExecutable_Destroy(&d));
}

std::string Runner::compile(const std::string& mlir) {
  PJRT_LoadedExecutable* exe = nullptr;
  std::string err = compile_impl(A(api_), static_cast<PJRT_Client*>(client_), mlir, &exe);
  destroy_exe(A(api_), exe);
  return err;
}

std::string Runner::run(const std::string& mlir, const std::vector<HostArray>& args,
                        size_t num_outputs, std::vector<std::vector<uint8_t>>* outputs) {
  const PJRT_Api* api = A(api_);
  auto* client = static_cast<PJRT_Client*>(client_);
  PJRT_LoadedExecutable* exe = nullptr;
  std::string err = compile_impl(api, client, mlir, &exe);
  if (!err.empty()) return "compile: " + err;

  std::vector<PJRT_Buffer*> in;
  for (const auto& a : args) {
    PJRT_Client_BufferFromHostBuffer_Args b{};
    b.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
    b.client = client;
    b.data = a.bytes.data();
    b.type = buffer_type(a.elem);
    b.dims = a.dims.data();
    b.num_dims = a.dims.size();
    b.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
    b.device = static_cast<PJRT_Device*>(device_);
    err = take(api, api->PJRT_Client_BufferFromHostBuffer(&b));
    if (err.empty()) err = await_and_destroy(api, b.done_with_host_buffer);
    in.push_back(b.buffer);
    if (!err.empty()) break;
  }

  std::vector<PJRT_Buffer*> out(num_outputs, nullptr);
  if (err.empty()) {
    PJRT_ExecuteOptions opts{};
    opts.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
    PJRT_Buffer* const* arg_list = in.data();
    PJRT_Buffer** out_list = out.data();
    PJRT_LoadedExecutable_Execute_Args e{};
    e.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
    e.executable = exe;
    e.options = &opts;
    e.argument_lists = &arg_list;
    e.num_devices = 1;
    e.num_args = in.size();
    e.output_lists = &out_list;
    err = take(api, api->PJRT_LoadedExecutable_Execute(&e));
    if (!err.empty()) err = "execute: " + err;
  }
  outputs->clear();
  for (size_t i = 0; err.empty() && i < num_outputs; ++i) {
    PJRT_Buffer_ToHostBuffer_Args t{};
    t.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
    t.src = out[i];
    err = take(api, api->PJRT_Buffer_ToHostBuffer(&t));  // size query
    if (!err.empty()) break;
    std::vector<uint8_t> host(t.dst_size);
    t.dst = host.data();
    err = take(api, api->PJRT_Buffer_ToHostBuffer(&t));
    if (err.empty()) err = await_and_destroy(api, t.event);
    outputs->push_back(std::move(host));
  }
  for (auto* b : out) destroy_buffer(api, b);
  for (auto* b : in) destroy_buffer(api, b);
  destroy_exe(api, exe);
  return err;
}

}  // namespace hlo_test

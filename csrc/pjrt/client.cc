// PJRT client: creation, device enumeration, host->device transfer, compile.
#include <cstring>
#include <type_traits>

#include "pjrt/internal.h"

namespace tpu::pjrt {

namespace {

std::string as_string(const char* data, size_t size) {
  return data ? std::string(data, size) : std::string();
}

// Converts one ClientOptions entry; the returned struct points into `name` and
// `value`, which the caller keeps alive for the duration of PJRT_Client_Create.
PJRT_NamedValue to_named_value(const std::string& name, const OptionValue& value) {
  TPU_PJRT_ARGS(PJRT_NamedValue, nv);
  nv.name = name.c_str();
  nv.name_size = name.size();
  nv.value_size = 1;
  std::visit(
      [&nv](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          nv.type = PJRT_NamedValue_kInt64;
          nv.int64_value = v;
        } else if constexpr (std::is_same_v<T, std::string>) {
          nv.type = PJRT_NamedValue_kString;
          nv.string_value = v.c_str();
          nv.value_size = v.size();  // strings count characters, not 1
        } else if constexpr (std::is_same_v<T, bool>) {
          nv.type = PJRT_NamedValue_kBool;
          nv.bool_value = v;
        } else {
          nv.type = PJRT_NamedValue_kFloat;
          nv.float_value = v;
        }
      },
      value);
  return nv;
}

DeviceInfo describe(const PJRT_Api* api, PJRT_Device* device) {
  DeviceInfo info;
  TPU_PJRT_ARGS(PJRT_Device_GetDescription_Args, desc_args);
  desc_args.device = device;
  TPU_PJRT_CALL(api, PJRT_Device_GetDescription, desc_args, "PJRT_Device_GetDescription");
  PJRT_DeviceDescription* desc = desc_args.device_description;

  TPU_PJRT_ARGS(PJRT_DeviceDescription_Id_Args, id_args);
  id_args.device_description = desc;
  TPU_PJRT_CALL(api, PJRT_DeviceDescription_Id, id_args, "PJRT_DeviceDescription_Id");
  info.id = id_args.id;

  TPU_PJRT_ARGS(PJRT_DeviceDescription_Kind_Args, kind_args);
  kind_args.device_description = desc;
  TPU_PJRT_CALL(api, PJRT_DeviceDescription_Kind, kind_args, "PJRT_DeviceDescription_Kind");
  info.kind = as_string(kind_args.device_kind, kind_args.device_kind_size);

  TPU_PJRT_ARGS(PJRT_DeviceDescription_DebugString_Args, dbg_args);
  dbg_args.device_description = desc;
  TPU_PJRT_CALL(api, PJRT_DeviceDescription_DebugString, dbg_args,
                "PJRT_DeviceDescription_DebugString");
  info.debug_string = as_string(dbg_args.debug_string, dbg_args.debug_string_size);

  TPU_PJRT_ARGS(PJRT_Device_LocalHardwareId_Args, hw_args);
  hw_args.device = device;
  TPU_PJRT_CALL(api, PJRT_Device_LocalHardwareId, hw_args, "PJRT_Device_LocalHardwareId");
  info.local_hardware_id = hw_args.local_hardware_id;
  return info;
}

}  // namespace

std::shared_ptr<Client> Client::create(std::shared_ptr<Plugin> plugin,
                                       const ClientOptions& options) {
  if (!plugin) throw Error(PJRT_Error_Code_INVALID_ARGUMENT, "Client::create: null plugin");
  const PJRT_Api* api = plugin->api();

  std::vector<PJRT_NamedValue> named;
  named.reserve(options.size());
  for (const auto& [name, value] : options) named.push_back(to_named_value(name, value));

  TPU_PJRT_ARGS(PJRT_Client_Create_Args, args);
  args.create_options = named.empty() ? nullptr : named.data();
  args.num_options = named.size();
  TPU_PJRT_CALL(api, PJRT_Client_Create, args,
                "creating PJRT client with plugin '" + plugin->path() + "'");

  // From here the destructor owns the PJRT client, so a failure while
  // enumerating devices below still releases it.
  std::shared_ptr<Client> client(new Client());
  client->plugin_ = std::move(plugin);
  client->client_ = args.client;

  TPU_PJRT_ARGS(PJRT_Client_AddressableDevices_Args, dev_args);
  dev_args.client = client->client_;
  TPU_PJRT_CALL(api, PJRT_Client_AddressableDevices, dev_args, "PJRT_Client_AddressableDevices");
  for (size_t i = 0; i < dev_args.num_addressable_devices; ++i) {
    PJRT_Device* device = dev_args.addressable_devices[i];
    client->raw_devices_.push_back(device);
    client->devices_.push_back(describe(api, device));
  }
  return client;
}

Client::~Client() {
  if (client_ == nullptr || api()->PJRT_Client_Destroy == nullptr) return;
  TPU_PJRT_ARGS(PJRT_Client_Destroy_Args, args);
  args.client = client_;
  detail::destroy_error(api(), api()->PJRT_Client_Destroy(&args));
}

std::string Client::platform_name() const {
  TPU_PJRT_ARGS(PJRT_Client_PlatformName_Args, args);
  args.client = client_;
  TPU_PJRT_CALL(api(), PJRT_Client_PlatformName, args, "PJRT_Client_PlatformName");
  return as_string(args.platform_name, args.platform_name_size);
}

std::string Client::platform_version() const {
  TPU_PJRT_ARGS(PJRT_Client_PlatformVersion_Args, args);
  args.client = client_;
  TPU_PJRT_CALL(api(), PJRT_Client_PlatformVersion, args, "PJRT_Client_PlatformVersion");
  return as_string(args.platform_version, args.platform_version_size);
}

PJRT_Device* Client::raw_device(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= raw_devices_.size()) {
    throw Error(PJRT_Error_Code_INVALID_ARGUMENT,
                "device index " + std::to_string(index) + " out of range: the " +
                    plugin_->path() + " client has " + std::to_string(raw_devices_.size()) +
                    " addressable device(s)");
  }
  return raw_devices_[static_cast<size_t>(index)];
}

std::shared_ptr<Buffer> detail::upload_host_buffer(const Client& client, const void* data,
                                                   PJRT_Buffer_Type type,
                                                   const std::vector<int64_t>& dims, int device,
                                                   PJRT_HostBufferSemantics semantics,
                                                   PJRT_Event** done_with_host) {
  TPU_PJRT_ARGS(PJRT_Client_BufferFromHostBuffer_Args, args);
  args.client = client.raw();
  args.data = data;
  args.type = type;
  args.dims = dims.empty() ? nullptr : dims.data();
  args.num_dims = dims.size();
  args.byte_strides = nullptr;  // dense, major-to-minor
  args.num_byte_strides = 0;
  args.host_buffer_semantics = semantics;
  args.device = client.raw_device(device);
  TPU_PJRT_CALL(client.api(), PJRT_Client_BufferFromHostBuffer, args,
                "copying host data to device " + std::to_string(device));
  *done_with_host = args.done_with_host_buffer;
  return std::make_shared<Buffer>(client.shared_from_this(), args.buffer);
}

std::shared_ptr<Buffer> Client::buffer_from_host(const void* data, PJRT_Buffer_Type type,
                                                 const std::vector<int64_t>& dims,
                                                 int device) const {
  // The copy is finished when the call returns, so callers may free or reuse
  // `data` at once (tensors on the host side are not pinned for us).
  PJRT_Event* done_with_host = nullptr;
  auto buffer = detail::upload_host_buffer(*this, data, type, dims, device,
                                           PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
                                           &done_with_host);
  if (done_with_host != nullptr) {
    // Under kImmutableOnlyDuringCall this event is already (or nearly) ready;
    // waiting keeps the promise that `data` is free when we return.
    Event done(shared_from_this(), done_with_host);
    done.await();
  }
  return buffer;
}

std::shared_ptr<Executable> Client::compile(const std::string& mlir_text,
                                            const CompileOptions& options) const {
  static const char kFormat[] = "mlir";
  TPU_PJRT_ARGS(PJRT_Program, program);
  // PJRT_Program.code is non-const because the struct is also used for output;
  // Compile only reads it.
  program.code = const_cast<char*>(mlir_text.data());
  program.code_size = mlir_text.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;

  const std::string opts = options.serialize();
  TPU_PJRT_ARGS(PJRT_Client_Compile_Args, args);
  args.client = client_;
  args.program = &program;
  args.compile_options = opts.data();
  args.compile_options_size = opts.size();
  TPU_PJRT_CALL(api(), PJRT_Client_Compile, args, "compiling StableHLO program");
  return std::make_shared<Executable>(shared_from_this(), args.executable);
}

std::shared_ptr<Executable> Client::deserialize(const std::string& bytes,
                                                const CompileOptions& options) const {
  TPU_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args, args);
  args.client = client_;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  // Default options mean "as compiled": passing null keeps the options stored
  // in the serialized executable instead of overriding them with our defaults.
  const CompileOptions defaults;
  std::string opts;
  if (options.num_replicas != defaults.num_replicas ||
      options.num_partitions != defaults.num_partitions ||
      options.device_ordinal != defaults.device_ordinal) {
    opts = options.serialize();
    args.overridden_serialized_compile_options = opts.data();
    args.overridden_serialized_compile_options_size = opts.size();
  }
  TPU_PJRT_CALL(api(), PJRT_Executable_DeserializeAndLoad, args,
                "deserializing executable (" + std::to_string(bytes.size()) + " bytes)");
  return std::make_shared<Executable>(shared_from_this(), args.loaded_executable);
}

MemoryStats Client::memory_stats(int device) const {
  MemoryStats out;
  if (api()->PJRT_Device_MemoryStats == nullptr || device < 0 ||
      device >= static_cast<int>(raw_devices_.size()))
    return out;
  TPU_PJRT_ARGS(PJRT_Device_MemoryStats_Args, args);
  args.device = raw_devices_[static_cast<size_t>(device)];
  PJRT_Error* err = api()->PJRT_Device_MemoryStats(&args);
  if (err != nullptr) {  // e.g. UNIMPLEMENTED on the CPU plugin
    detail::destroy_error(api(), err);
    return out;
  }
  out.available = true;
  out.bytes_in_use = args.bytes_in_use;
  if (args.bytes_limit_is_set) out.bytes_limit = args.bytes_limit;
  return out;
}

}  // namespace tpu::pjrt

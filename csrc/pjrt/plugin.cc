// Loading a PJRT plugin shared library and checking that we can talk to it.
#include <dlfcn.h>

#include <mutex>
#include <unordered_map>

#include "pjrt/internal.h"

namespace tpu::pjrt {

namespace {

// The last PJRT_Api member this layer calls unconditionally. Members added
// after it (e.g. PJRT_Executable_Fingerprint) are checked at their call site.
constexpr size_t kRequiredApiSize = PJRT_STRUCT_SIZE(PJRT_Api, PJRT_Buffer_ReadyEvent);

const char* kPlatformHint = ". Set TORCH_TPU_PLATFORM to cpu, tpu, cuda or a valid plugin path";

// One Plugin per loaded library: PJRT_Plugin_Initialize must run only once per
// process, and plugins are never unloaded, so holding them forever costs nothing.
std::mutex g_mu;
std::unordered_map<void*, std::shared_ptr<Plugin>>& loaded() {
  static auto* map = new std::unordered_map<void*, std::shared_ptr<Plugin>>();
  return *map;
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

}  // namespace

std::shared_ptr<Plugin> Plugin::load(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mu);
  // RTLD_LOCAL: plugins bundle their own copies of LLVM/abseil/protobuf symbols
  // that must not leak into (or collide with) the rest of the process.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw Error(PJRT_Error_Code_NOT_FOUND,
                "cannot load PJRT plugin '" + path + "': " + dl_error() + kPlatformHint);
  }
  auto it = loaded().find(handle);
  if (it != loaded().end()) return it->second;

  using GetPjrtApiFn = const PJRT_Api* (*)();
  dlerror();  // clear any stale error so the next dlerror() is about this dlsym
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw Error(PJRT_Error_Code_NOT_FOUND, "'" + path + "' is not a PJRT plugin (no GetPjrtApi: " +
                                               dl_error() + ")" + kPlatformHint);
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) {
    throw Error(PJRT_Error_Code_INTERNAL, "PJRT plugin '" + path + "' returned no API table");
  }
  const int major = api->pjrt_api_version.major_version;
  const int minor = api->pjrt_api_version.minor_version;
  if (major != PJRT_API_MAJOR) {
    throw Error(PJRT_Error_Code_FAILED_PRECONDITION,
                "PJRT plugin '" + path + "' has API version " + std::to_string(major) + "." +
                    std::to_string(minor) + " but torch_tpu was built for major version " +
                    std::to_string(PJRT_API_MAJOR));
  }
  if (api->struct_size < kRequiredApiSize) {
    throw Error(PJRT_Error_Code_FAILED_PRECONDITION,
                "PJRT plugin '" + path + "' (API " + std::to_string(major) + "." +
                    std::to_string(minor) + ") is too old: its PJRT_Api table has " +
                    std::to_string(api->struct_size) + " bytes, torch_tpu needs " +
                    std::to_string(kRequiredApiSize));
  }
  if (api->PJRT_Plugin_Initialize != nullptr) {
    TPU_PJRT_ARGS(PJRT_Plugin_Initialize_Args, args);
    check(api, api->PJRT_Plugin_Initialize(&args),
          "initializing PJRT plugin '" + path + "'");
  }

  std::shared_ptr<Plugin> plugin(new Plugin());
  plugin->path_ = path;
  plugin->handle_ = handle;
  plugin->api_ = api;
  loaded()[handle] = plugin;
  return plugin;
}

int Plugin::api_major() const { return api_->pjrt_api_version.major_version; }
int Plugin::api_minor() const { return api_->pjrt_api_version.minor_version; }

// Deliberately no dlclose: plugins start threads and register static state
// that outlives any client, so unloading them can crash at exit.
Plugin::~Plugin() = default;

}  // namespace tpu::pjrt

// PJRT_LoadedExecutable wrapper: launch, serialisation, fingerprint.
#include <algorithm>
#include <atomic>
#include <mutex>

#include "pjrt/internal.h"
#include "pjrt/small_array.h"

namespace tpu::pjrt {

namespace {

// PJRT_LoadedExecutable_GetExecutable hands out a new PJRT_Executable that the
// caller must destroy; this guard makes sure every path does.
class UnloadedExecutable {
 public:
  UnloadedExecutable(const PJRT_Api* api, PJRT_LoadedExecutable* loaded) : api_(api) {
    TPU_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, args);
    args.loaded_executable = loaded;
    TPU_PJRT_CALL(api, PJRT_LoadedExecutable_GetExecutable, args,
                  "PJRT_LoadedExecutable_GetExecutable");
    exe_ = args.executable;
  }
  ~UnloadedExecutable() {
    if (exe_ == nullptr || api_->PJRT_Executable_Destroy == nullptr) return;
    TPU_PJRT_ARGS(PJRT_Executable_Destroy_Args, args);
    args.executable = exe_;
    detail::destroy_error(api_, api_->PJRT_Executable_Destroy(&args));
  }
  UnloadedExecutable(const UnloadedExecutable&) = delete;
  UnloadedExecutable& operator=(const UnloadedExecutable&) = delete;
  PJRT_Executable* get() const { return exe_; }

 private:
  const PJRT_Api* api_;
  PJRT_Executable* exe_ = nullptr;
};

void destroy_loaded(const PJRT_Api* api, PJRT_LoadedExecutable* exe) noexcept {
  if (exe == nullptr || api->PJRT_LoadedExecutable_Destroy == nullptr) return;
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, args);
  args.executable = exe;
  detail::destroy_error(api, api->PJRT_LoadedExecutable_Destroy(&args));
}

}  // namespace

Executable::Executable(std::shared_ptr<const Client> client, PJRT_LoadedExecutable* exe)
    : client_(std::move(client)), exe_(exe) {
  // The output count is fixed per program and needed on every launch, so ask once.
  try {
    UnloadedExecutable unloaded(client_->api(), exe_);
    TPU_PJRT_ARGS(PJRT_Executable_NumOutputs_Args, args);
    args.executable = unloaded.get();
    TPU_PJRT_CALL(client_->api(), PJRT_Executable_NumOutputs, args, "PJRT_Executable_NumOutputs");
    num_outputs_ = args.num_outputs;
  } catch (...) {
    // A throwing constructor skips the destructor; release the executable here.
    destroy_loaded(client_->api(), exe_);
    throw;
  }
}

Executable::~Executable() { destroy_loaded(client_->api(), exe_); }

size_t Executable::num_outputs() const { return num_outputs_; }

namespace {
// 0, 1, 2, ...: the non-donatable indices of a launch that donates nothing (the
// usual one), shared so that such a launch builds no list. Grown under a lock,
// never shrunk; a launch reads only the first num_args entries.
const int64_t* all_indices(size_t n) {
  static std::mutex mu;
  // Outgrown versions are never freed: a launch on another thread may still read one.
  static std::atomic<const std::vector<int64_t>*> current{nullptr};
  const std::vector<int64_t>* v = current.load(std::memory_order_acquire);
  if (v != nullptr && v->size() >= n) return v->data();
  std::lock_guard<std::mutex> g(mu);
  v = current.load(std::memory_order_relaxed);
  if (v != nullptr && v->size() >= n) return v->data();
  auto* grown = new std::vector<int64_t>(std::max<size_t>(2 * n, 64));
  for (size_t i = 0; i < grown->size(); ++i) (*grown)[i] = static_cast<int64_t>(i);
  current.store(grown, std::memory_order_release);
  return grown->data();
}
}  // namespace

std::vector<std::shared_ptr<Buffer>> Executable::execute(Buffer* const* args, size_t num_args,
                                                         int device,
                                                         const std::vector<int64_t>& donate,
                                                         std::shared_ptr<Event>* done) const {
  const PJRT_Api* api = client_->api();
  SmallArray<PJRT_Buffer*, 8> inputs(num_args, nullptr);
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i] == nullptr) {
      throw Error(PJRT_Error_Code_INVALID_ARGUMENT,
                  "execute: argument " + std::to_string(i) + " is null");
    }
    inputs[i] = args[i]->raw();
  }
  // PJRT donates every input the program aliases unless told otherwise; only
  // the caller knows which buffers nobody else holds, so everything outside
  // `donate` is protected explicitly.
  std::vector<int64_t> non_donatable;
  TPU_PJRT_ARGS(PJRT_ExecuteOptions, options);
  options.launch_id = 0;
  if (donate.empty()) {
    if (aliases_inputs_ && num_args > 0) {
      options.non_donatable_input_indices = all_indices(num_args);
      options.num_non_donatable_input_indices = num_args;
    }
  } else {
    non_donatable.reserve(num_args);
    for (size_t i = 0; i < num_args; ++i) {
      if (std::find(donate.begin(), donate.end(), static_cast<int64_t>(i)) == donate.end()) {
        non_donatable.push_back(static_cast<int64_t>(i));
      }
    }
    options.non_donatable_input_indices = non_donatable.empty() ? nullptr : non_donatable.data();
    options.num_non_donatable_input_indices = non_donatable.size();
  }

  SmallArray<PJRT_Buffer*, 8> outputs(num_outputs_, nullptr);
  PJRT_Buffer* const* argument_lists[1] = {inputs.data()};
  PJRT_Buffer** output_lists[1] = {outputs.data()};
  PJRT_Event* complete[1] = {nullptr};

  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, exec);
  exec.executable = exe_;
  exec.options = &options;
  exec.argument_lists = argument_lists;
  exec.num_devices = 1;
  exec.num_args = num_args;
  exec.output_lists = output_lists;
  exec.device_complete_events = done != nullptr ? complete : nullptr;
  exec.execute_device = client_->raw_device(device);
  TPU_PJRT_CALL(api, PJRT_LoadedExecutable_Execute, exec,
                "launching program on device " + std::to_string(device));

  if (done != nullptr) *done = complete[0] ? std::make_shared<Event>(client_, complete[0]) : nullptr;
  std::vector<std::shared_ptr<Buffer>> result;
  result.reserve(num_outputs_);
  for (size_t i = 0; i < num_outputs_; ++i)
    result.push_back(std::make_shared<Buffer>(client_, outputs[i]));
  return result;
}

std::vector<std::vector<std::shared_ptr<Buffer>>> Executable::execute_replicated(
    const std::vector<std::vector<Buffer*>>& args) const {
  const PJRT_Api* api = client_->api();
  const size_t n = args.size();
  if (n == 0 || n > client_->device_count()) {
    throw Error(PJRT_Error_Code_INVALID_ARGUMENT,
                "execute_replicated: " + std::to_string(n) + " replicas for " +
                    std::to_string(client_->device_count()) + " devices");
  }
  std::vector<std::vector<PJRT_Buffer*>> inputs(n);
  std::vector<std::vector<PJRT_Buffer*>> outputs(n, std::vector<PJRT_Buffer*>(num_outputs_));
  std::vector<PJRT_Buffer* const*> argument_lists(n);
  std::vector<PJRT_Buffer**> output_lists(n);
  for (size_t r = 0; r < n; ++r) {
    if (args[r].size() != args[0].size()) {
      throw Error(PJRT_Error_Code_INVALID_ARGUMENT,
                  "execute_replicated: replicas differ in their number of arguments");
    }
    for (size_t i = 0; i < args[r].size(); ++i) {
      if (args[r][i] == nullptr) {
        throw Error(PJRT_Error_Code_INVALID_ARGUMENT, "execute_replicated: replica " +
                                                          std::to_string(r) + " argument " +
                                                          std::to_string(i) + " is null");
      }
      inputs[r].push_back(args[r][i]->raw());
    }
    argument_lists[r] = inputs[r].data();
    output_lists[r] = outputs[r].data();
  }
  std::vector<int64_t> non_donatable(args[0].size());
  for (size_t i = 0; i < non_donatable.size(); ++i) non_donatable[i] = static_cast<int64_t>(i);

  TPU_PJRT_ARGS(PJRT_ExecuteOptions, options);
  options.launch_id = 0;
  options.non_donatable_input_indices = non_donatable.empty() ? nullptr : non_donatable.data();
  options.num_non_donatable_input_indices = non_donatable.size();
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, exec);
  exec.executable = exe_;
  exec.options = &options;
  exec.argument_lists = argument_lists.data();
  exec.num_devices = n;
  exec.num_args = args[0].size();
  exec.output_lists = output_lists.data();
  exec.device_complete_events = nullptr;
  exec.execute_device = nullptr;  // the executable's own device assignment
  TPU_PJRT_CALL(api, PJRT_LoadedExecutable_Execute, exec,
                "launching program on " + std::to_string(n) + " replicas");
  std::vector<std::vector<std::shared_ptr<Buffer>>> result(n);
  for (size_t r = 0; r < n; ++r)
    for (PJRT_Buffer* out : outputs[r]) result[r].push_back(std::make_shared<Buffer>(client_, out));
  return result;
}

std::string Executable::serialize() const {
  const PJRT_Api* api = client_->api();
  UnloadedExecutable unloaded(api, exe_);
  TPU_PJRT_ARGS(PJRT_Executable_Serialize_Args, args);
  args.executable = unloaded.get();
  TPU_PJRT_CALL(api, PJRT_Executable_Serialize, args, "serializing executable");
  std::string bytes;
  if (args.serialized_bytes != nullptr) bytes.assign(args.serialized_bytes, args.serialized_bytes_size);
  // The bytes are owned by serialized_executable; free it once copied.
  if (args.serialized_executable_deleter != nullptr && args.serialized_executable != nullptr) {
    args.serialized_executable_deleter(args.serialized_executable);
  }
  return bytes;
}

std::string Executable::fingerprint() const {
  const PJRT_Api* api = client_->api();
  // PJRT_Executable_Fingerprint is a later addition to PJRT_Api; older plugins
  // (or ones that do not implement it) simply have no fingerprint.
  if (api->struct_size < PJRT_STRUCT_SIZE(PJRT_Api, PJRT_Executable_Fingerprint) ||
      api->PJRT_Executable_Fingerprint == nullptr) {
    return "";
  }
  try {
    UnloadedExecutable unloaded(api, exe_);
    TPU_PJRT_ARGS(PJRT_Executable_Fingerprint_Args, args);
    args.executable = unloaded.get();
    TPU_PJRT_CALL(api, PJRT_Executable_Fingerprint, args, "PJRT_Executable_Fingerprint");
    // The string lives as long as the PJRT_Executable: copy before it goes.
    if (args.executable_fingerprint == nullptr) return "";
    return std::string(args.executable_fingerprint, args.executable_fingerprint_size);
  } catch (const Error&) {
    return "";
  }
}

}  // namespace tpu::pjrt

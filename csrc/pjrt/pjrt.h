// torch_tpu PJRT layer: a small C++ face over the PJRT C API.
//
// No PyTorch header may be included here or in any csrc/pjrt file: this layer
// compiles in seconds and is unit-tested on its own (tests/pjrt).
//
// Ownership: every object is held by std::shared_ptr; a Buffer or Executable
// keeps its Client alive, and a Client keeps its Plugin alive, so destruction
// order never matters to callers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "pjrt_c_api.h"

namespace tpu::pjrt {

// A PJRT error turned into a C++ exception. `code` is PJRT_Error_Code
// (e.g. PJRT_Error_Code_RESOURCE_EXHAUSTED for device out-of-memory).
class Error : public std::runtime_error {
 public:
  Error(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }
  bool is_out_of_memory() const { return code_ == PJRT_Error_Code_RESOURCE_EXHAUSTED; }

 private:
  int code_;
};

// Throws Error("<context>: <PJRT message>") and destroys `err` when it is non-null.
void check(const PJRT_Api* api, PJRT_Error* err, const std::string& context);

// A loaded plugin: dlopen + GetPjrtApi + PJRT_Plugin_Initialize.
class Plugin {
 public:
  // Throws Error (code PJRT_Error_Code_NOT_FOUND) naming the path and dlerror()
  // when the file cannot be loaded or lacks GetPjrtApi; throws when the major API
  // version differs from the header's, or the plugin's PJRT_Api struct is
  // smaller than the members we call.
  static std::shared_ptr<Plugin> load(const std::string& path);
  const PJRT_Api* api() const { return api_; }
  const std::string& path() const { return path_; }
  int api_major() const;
  int api_minor() const;
  ~Plugin();  // never dlcloses (plugins are not safe to unload)

 private:
  Plugin() = default;
  std::string path_;
  void* handle_ = nullptr;
  const PJRT_Api* api_ = nullptr;
};

using OptionValue = std::variant<int64_t, std::string, bool, float>;
using ClientOptions = std::map<std::string, OptionValue>;  // PJRT_NamedValue list

class Client;

// Completion of asynchronous device work.
class Event {
 public:
  Event(std::shared_ptr<const Client> client, PJRT_Event* ev);
  // A finished event that carries `failure` (fault injection in tests, see
  // engine/async_errors.h): await() throws it, error_message() returns it.
  explicit Event(std::string failure);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  bool is_ready() const;
  // Blocks until ready; throws Error carrying the asynchronous failure, if any.
  void await() const;
  // The failure of the work, "" when it succeeded; only meaningful once
  // is_ready(). Never throws.
  std::string error_message() const;
  // Calls `fn` once the event is ready, on whichever thread completes it (on
  // this one, at once, when it is ready already). A failure of the work is not
  // passed on: await() reports it.
  void on_ready(std::function<void()> fn) const;

 private:
  std::shared_ptr<const Client> client_;
  PJRT_Event* ev_;
  std::string failure_;
};

// One device buffer (immutable contents, as PJRT buffers are).
class Buffer {
 public:
  Buffer(std::shared_ptr<const Client> client, PJRT_Buffer* buf);
  ~Buffer();  // PJRT_Buffer_Destroy
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  PJRT_Buffer* raw() const { return buf_; }
  PJRT_Buffer_Type element_type() const;
  std::vector<int64_t> dims() const;
  size_t on_device_size() const;  // bytes
  int device_id() const;          // local device index (position in Client::devices())
  bool is_deleted() const;        // true after it was donated to an execution
  // Frees the contents now (PJRT_Buffer_Delete): reading it then fails.
  void delete_contents();

  // Completion of the computation or transfer that produces this buffer.
  std::unique_ptr<Event> ready_event() const;
  // Waits until ready; throws the asynchronous error of the producer, if any.
  void await_ready() const;

  // Copies the whole buffer (dense, row-major) into `dst` (`nbytes` must equal the
  // dense size); blocks until done; throws Error on failure.
  void to_host(void* dst, size_t nbytes) const;

 private:
  std::shared_ptr<const Client> client_;
  PJRT_Buffer* buf_;
};

// Options for compiling one program; encoded as a serialised xla.CompileOptionsProto.
struct CompileOptions {
  int num_replicas = 1;
  int num_partitions = 1;
  int device_ordinal = -1;  // -1: not set
  std::string serialize() const;  // protobuf wire encoding, written by hand
};

class Executable {
 public:
  Executable(std::shared_ptr<const Client> client, PJRT_LoadedExecutable* exe);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  size_t num_outputs() const;
  // Whether the program may alias an input to an output (true unless told
  // otherwise). A launch of one that does not passes no non-donatable list:
  // PJRT builds a hash set of it per launch, and nothing could be donated.
  bool aliases_inputs() const { return aliases_inputs_; }
  void set_aliases_inputs(bool on) { aliases_inputs_ = on; }
  // Runs on local device `device` (index into Client::devices()). Outputs come back
  // at once; their contents are ready when their ready events fire (PJRT is
  // asynchronous). Inputs whose index is in `donate` may be consumed (donated:
  // the program must alias them, see hlo::Builder::parameter(..., donate)); all
  // other inputs are passed as non-donatable. Throws Error on failure to launch.
  // With `done`, also sets it to the launch's completion event (which carries
  // the program's failure): one event per launch, cheaper than asking an
  // output for its ready event afterwards.
  std::vector<std::shared_ptr<Buffer>> execute(const std::vector<Buffer*>& args, int device,
                                               const std::vector<int64_t>& donate = {},
                                               std::shared_ptr<Event>* done = nullptr) const {
    return execute(args.data(), args.size(), device, donate, done);
  }
  // The same with the arguments as `num_args` pointers at `args` (a caller's
  // stack array: a launch of a few inputs then allocates no list).
  std::vector<std::shared_ptr<Buffer>> execute(Buffer* const* args, size_t num_args, int device,
                                               const std::vector<int64_t>& donate = {},
                                               std::shared_ptr<Event>* done = nullptr) const;
  // Runs a program compiled with num_replicas = args.size() once on each of the
  // client's first args.size() devices (replica i on device i), all launched
  // by one call as in-program collectives need. args[i] are replica i's
  // inputs (none donated); returns each replica's outputs.
  std::vector<std::vector<std::shared_ptr<Buffer>>> execute_replicated(
      const std::vector<std::vector<Buffer*>>& args) const;
  // Bytes that Client::deserialize() turns back into an equivalent executable.
  std::string serialize() const;
  // PJRT_Executable_Fingerprint, or "" when the plugin gives none.
  std::string fingerprint() const;

 private:
  std::shared_ptr<const Client> client_;
  PJRT_LoadedExecutable* exe_;
  size_t num_outputs_ = 0;
  bool aliases_inputs_ = true;
};

struct DeviceInfo {
  int id = 0;             // PJRT global id
  int local_hardware_id = 0;
  std::string kind;       // e.g. "cpu", "TPU v5 lite"
  std::string debug_string;
};

// What a device's allocator reports (PJRT_Device_MemoryStats); a field the
// plugin leaves unset is -1. The CPU plugin reports nothing: `available` false.
struct MemoryStats {
  bool available = false;
  int64_t bytes_in_use = -1;
  int64_t bytes_limit = -1;
};

class Client : public std::enable_shared_from_this<Client> {
 public:
  // PJRT_Client_Create with `options` as PJRT_NamedValue (the CPU plugin reads
  // "cpu_device_count" as int64).
  static std::shared_ptr<Client> create(std::shared_ptr<Plugin> plugin,
                                        const ClientOptions& options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const PJRT_Api* api() const { return plugin_->api(); }
  const std::shared_ptr<Plugin>& plugin() const { return plugin_; }
  PJRT_Client* raw() const { return client_; }
  std::string platform_name() const;     // e.g. "cpu"
  std::string platform_version() const;  // plugin build/version string
  const std::vector<DeviceInfo>& devices() const { return devices_; }  // addressable
  size_t device_count() const { return devices_.size(); }
  PJRT_Device* raw_device(int index) const;
  // The device allocator's figures; never throws (a plugin without them says so).
  MemoryStats memory_stats(int device) const;

  // Host -> device copy of a dense row-major array (copied before returning,
  // kImmutableOnlyDuringCall semantics). Throws Error on failure.
  std::shared_ptr<Buffer> buffer_from_host(const void* data, PJRT_Buffer_Type type,
                                           const std::vector<int64_t>& dims, int device) const;

  // Compiles StableHLO/MLIR text (program format "mlir"). Throws Error carrying
  // the compiler's message on failure.
  std::shared_ptr<Executable> compile(const std::string& mlir_text,
                                      const CompileOptions& options = {}) const;
  // Inverse of Executable::serialize(). Throws Error when the bytes are not a
  // valid executable for this plugin.
  std::shared_ptr<Executable> deserialize(const std::string& bytes,
                                          const CompileOptions& options = {}) const;

 private:
  Client() = default;
  std::shared_ptr<Plugin> plugin_;
  PJRT_Client* client_ = nullptr;
  std::vector<PJRT_Device*> raw_devices_;
  std::vector<DeviceInfo> devices_;
};

// Byte size of one element of `type`; throws for types without a fixed size.
size_t element_size(PJRT_Buffer_Type type);

}  // namespace tpu::pjrt

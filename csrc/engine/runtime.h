// The process-wide PJRT runtime: which plugin, the client, its devices.
//
// Python decides the plugin (TORCH_TPU_PLATFORM, found through packaging) and
// calls configure(); the plugin is loaded on first use, so `import torch_tpu`
// stays cheap. After fork() the child may not touch the parent's client (PJRT
// clients own threads), exactly like CUDA: use raises a clear error.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pjrt/pjrt.h"

namespace tpu::engine {

class Runtime {
 public:
  static Runtime& get();

  // `platform`: the name the user asked for ("cpu", "tpu", "cuda" or a path);
  // `plugin_path`: the shared library; `cpu_device_count` for the CPU plugin;
  // `plugin_logs`: let the plugin's start-up logging reach stderr.
  void configure(const std::string& platform, const std::string& plugin_path,
                 int64_t cpu_device_count, bool plugin_logs = false);
  bool configured() const;
  bool initialized() const;

  // Loads the plugin and creates the client on first call; throws
  // pjrt::Error with a message saying what to do when that fails.
  pjrt::Client& client();
  int device_count();
  void check_device(int index);  // throws std::out_of_range-like c10-free error
  std::string platform() const { return platform_; }
  std::string plugin_path() const { return plugin_path_; }

  // Per-device memory accounting (PJRT CPU has no memory stats of its own).
  void note_alloc(int device, int64_t bytes);
  void note_free(int device, int64_t bytes);
  int64_t allocated(int device) const;
  int64_t peak(int device) const;
  int64_t alloc_count(int device) const;
  void reset_peak(int device);

  void mark_forked() { forked_ = true; }

 private:
  Runtime();
  mutable std::mutex mu_;
  std::string platform_, plugin_path_;
  int64_t cpu_device_count_ = 1;
  bool plugin_logs_ = false;
  std::shared_ptr<pjrt::Client> client_;
  std::string init_error_;
  bool forked_ = false;
  struct Mem {
    int64_t live = 0, peak = 0, count = 0;
  };
  std::vector<Mem> mem_;
  Mem& mem(int device);
};

}  // namespace tpu::engine

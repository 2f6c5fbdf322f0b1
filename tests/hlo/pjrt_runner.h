// Minimal PJRT C API runner for hlo_test: compiles MLIR text on a plugin and
// runs it once. Private to this test so the HLO layer can be checked against the
// real compiler without depending on csrc/pjrt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hlo/builder.h"

namespace hlo_test {

struct HostArray {
  tpu::hlo::ElemType elem;
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // dense row-major
};

class Runner {
 public:
  // Loads the plugin and creates a client; returns "" or an error message.
  std::string open(const std::string& plugin_path);
  // Compiles and runs `mlir`; fills `outputs` (one byte vector per result).
  // Returns "" or the PJRT error message.
  std::string run(const std::string& mlir, const std::vector<HostArray>& args, size_t num_outputs,
                  std::vector<std::vector<uint8_t>>* outputs);
  // Compiles only.
  std::string compile(const std::string& mlir);

 private:
  const void* api_ = nullptr;  // const PJRT_Api*
  void* client_ = nullptr;     // PJRT_Client*
  void* device_ = nullptr;     // PJRT_Device*
};

}  // namespace hlo_test

// TORCH_TPU_DUMP_DIR: each program's StableHLO and a small JSON describing it,
// so that a user can see what was compiled without reading our source.
// Torch-free; best effort (an unwritable directory loses the dump, nothing else).
#pragma once

#include <string>

namespace tpu::engine {

struct ProgramRecord {
  std::string key;     // cache key (hex); also the file names
  std::string what;    // op or graph name
  std::string source;  // "compile" or "disk"
  double seconds = 0;  // compile or load time
  size_t num_outputs = 0;
};

// Writes <dir>/<key>.mlir and <dir>/<key>.json (inputs and outputs are read off
// the signature of @main in `mlir`).
void dump_program(const std::string& dir, const std::string& mlir, const ProgramRecord& r);

}  // namespace tpu::engine

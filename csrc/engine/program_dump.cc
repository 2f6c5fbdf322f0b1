#include "engine/program_dump.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tpu::engine {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Every "tensor<...>" in `s` (the types of a signature's parameters or results).
std::vector<std::string> tensor_types(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = s.find("tensor<", pos)) != std::string::npos) {
    size_t end = s.find('>', pos);
    if (end == std::string::npos) break;
    out.push_back(s.substr(pos, end - pos + 1));
    pos = end + 1;
  }
  return out;
}

std::string json_list(const std::vector<std::string>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_string(v[i]);
  return out + "]";
}

}  // namespace

void dump_program(const std::string& dir, const std::string& mlir, const ProgramRecord& r) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return;
  std::string params, results;
  size_t sig = mlir.find("@main(");
  size_t arrow = sig == std::string::npos ? sig : mlir.find(") -> (", sig);
  size_t body = arrow == std::string::npos ? arrow : mlir.find(") {", arrow);
  if (body != std::string::npos) {
    params = mlir.substr(sig, arrow - sig);
    results = mlir.substr(arrow, body - arrow);
  }
  std::filesystem::path base = std::filesystem::path(dir) / r.key;
  std::ofstream(base.string() + ".mlir") << mlir;
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.6f", r.seconds);
  std::ofstream(base.string() + ".json")
      << "{\n  \"what\": " << json_string(r.what) << ",\n  \"key\": " << json_string(r.key)
      << ",\n  \"source\": " << json_string(r.source) << ",\n  \"seconds\": " << secs
      << ",\n  \"inputs\": " << json_list(tensor_types(params))
      << ",\n  \"outputs\": " << json_list(tensor_types(results))
      << ",\n  \"num_outputs\": " << r.num_outputs << "\n}\n";
}

}  // namespace tpu::engine

// xla.CompileOptionsProto encoded by hand, so this layer needs no protobuf
// dependency. Only the fields we set are written; the rest keep proto defaults.
#include "pjrt/internal.h"

namespace tpu::pjrt {

namespace {

enum WireType : uint32_t { kVarint = 0, kLengthDelimited = 2 };

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_tag(std::string& out, uint32_t field, WireType wire) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire);
}

// int64 fields encode negatives as 10-byte two's complement varints.
void put_int64_field(std::string& out, uint32_t field, int64_t v) {
  put_tag(out, field, kVarint);
  put_varint(out, static_cast<uint64_t>(v));
}

// Field numbers from xla/pjrt/proto/compile_options.proto and xla/xla.proto.
constexpr uint32_t kCompileOptionsExecutableBuildOptions = 3;
constexpr uint32_t kCompileOptionsCompilePortableExecutable = 4;
constexpr uint32_t kBuildOptionsDeviceOrdinal = 1;
constexpr uint32_t kBuildOptionsNumReplicas = 4;
constexpr uint32_t kBuildOptionsNumPartitions = 5;

}  // namespace

std::string CompileOptions::serialize() const {
  std::string build;  // ExecutableBuildOptionsProto
  if (device_ordinal >= 0) put_int64_field(build, kBuildOptionsDeviceOrdinal, device_ordinal);
  put_int64_field(build, kBuildOptionsNumReplicas, num_replicas);
  put_int64_field(build, kBuildOptionsNumPartitions, num_partitions);

  std::string out;  // CompileOptionsProto
  put_tag(out, kCompileOptionsExecutableBuildOptions, kLengthDelimited);
  put_varint(out, build.size());
  out += build;
  // A single-device program is compiled "portable": it has no device
  // assignment baked in, so one executable (and one cache entry) serves every
  // device. PJRT_LoadedExecutable_Execute with execute_device set only runs
  // such executables on devices other than the one assigned at compile time.
  if (num_replicas == 1 && num_partitions == 1) {
    put_tag(out, kCompileOptionsCompilePortableExecutable, kVarint);
    put_varint(out, 1);
  }
  return out;
}

}  // namespace tpu::pjrt

// Unit test of csrc/pjrt against a real PJRT plugin (normally the CPU plugin).
//
// Usage: pjrt_test [plugin.so]   (default: $TORCH_TPU_PJRT_PLUGIN)
// Programs are written as StableHLO text by hand so this test depends on
// nothing but the pjrt layer.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../cpp_check.h"
#include "core/settings.h"
#include "pjrt/pjrt.h"
#include "pjrt/small_array.h"

using namespace tpu::pjrt;

namespace {

// Runs `body` expecting it to throw tpu::pjrt::Error and keeps the error in
// `out_error` so the caller can check its code and message.
#define CHECK_THROWS(body, out_error)                                              \
  do {                                                                             \
    bool threw_ = false;                                                           \
    try {                                                                          \
      body;                                                                        \
    } catch (const Error& e_) {                                                    \
      threw_ = true;                                                               \
      out_error = std::make_unique<Error>(e_);                                     \
    } catch (const std::exception& e_) {                                           \
      std::fprintf(stderr, "  wrong exception type: %s\n", e_.what());             \
    }                                                                              \
    ::cpp_check::record(threw_, __FILE__, __LINE__, "expected Error from " #body); \
  } while (0)

using cpp_check::section;

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<float> read_f32(const Buffer& b, size_t n) {
  std::vector<float> v(n);
  b.to_host(v.data(), n * sizeof(float));
  return v;
}

// StableHLO: elementwise add of two tensor<4xf32>, in MLIR generic op syntax
// (including the terminator, "func.return").
const char* kAddGeneric = R"(module @m {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }
})";

// Same program, pretty syntax for the terminator.
const char* kAddPrettyReturn = R"(module @m {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %0 : tensor<4xf32>
  }
})";

// Argument 0 aliases output 0, so PJRT may reuse (donate) its buffer.
const char* kDonatingDouble = R"(module @m {
  func.func public @main(%a: tensor<4xf32> {tf.aliasing_output = 0 : i32}) -> tensor<4xf32> {
    %0 = "stablehlo.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }
})";

// Rank-0 program with two outputs: (x * x, x + x).
const char* kScalarTwoOutputs = R"(module @m {
  func.func public @main(%x: tensor<f32>) -> (tensor<f32>, tensor<f32>) {
    %0 = "stablehlo.multiply"(%x, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %1 = "stablehlo.add"(%x, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    "func.return"(%0, %1) : (tensor<f32>, tensor<f32>) -> ()
  }
})";

// A matmul big enough to take measurable time: shows whether execute() returns
// before the device work is done.
const char* kBigDot = R"(module @m {
  func.func public @main(%a: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
    %0 = "stablehlo.dot_general"(%a, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    %1 = "stablehlo.dot_general"(%0, %a) {dot_dimension_numbers = #stablehlo.dot<lhs_contracting_dimensions = [1], rhs_contracting_dimensions = [0]>} : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
    "func.return"(%1) : (tensor<1024x1024xf32>) -> ()
  }
})";

// n rank-0 inputs, n outputs (x_i + x_i): more than SmallArray's 8 stack
// entries on both sides of execute().
std::string many_in_out(int n) {
  std::string args, types, body, rets;
  for (int i = 0; i < n; ++i) {
    std::string k = std::to_string(i), sep = i ? ", " : "";
    args += sep + "%a" + k + ": tensor<f32>";
    types += sep + "tensor<f32>";
    body += "    %r" + k + " = \"stablehlo.add\"(%a" + k + ", %a" + k +
            ") : (tensor<f32>, tensor<f32>) -> tensor<f32>\n";
    rets += sep + "%r" + k;
  }
  return "module @m {\n  func.func public @main(" + args + ") -> (" + types + ") {\n" + body +
         "    \"func.return\"(" + rets + ") : (" + types + ") -> ()\n  }\n}";
}

std::string hex(const std::string& bytes) {
  std::string out;
  char buf[4];
  for (unsigned char c : bytes) {
    std::snprintf(buf, sizeof(buf), "%02x", c);
    out += buf;
  }
  return out;
}

// bf16 is the top half of an f32 (truncation is exact for these values).
uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugin_path;
  if (argc > 1) {
    plugin_path = argv[1];
  } else if (const char* env = tpu::settings::raw("TORCH_TPU_PJRT_PLUGIN")) {
    plugin_path = env;
  }
  if (plugin_path.empty()) {
    std::fprintf(stderr, "usage: %s <pjrt plugin .so> (or set TORCH_TPU_PJRT_PLUGIN)\n", argv[0]);
    return 2;
  }

  section("pure helpers", [] {
    CHECK(element_size(PJRT_Buffer_Type_PRED) == 1);
    CHECK(element_size(PJRT_Buffer_Type_BF16) == 2);
    CHECK(element_size(PJRT_Buffer_Type_F32) == 4);
    CHECK(element_size(PJRT_Buffer_Type_S64) == 8);
    CHECK(element_size(PJRT_Buffer_Type_C64) == 8);
    CHECK(element_size(PJRT_Buffer_Type_C128) == 16);
    std::unique_ptr<Error> err;
    CHECK_THROWS(element_size(PJRT_Buffer_Type_S4), err);

    // Wire format: field 3 (tag 0x1a) holding num_replicas (0x20) and
    // num_partitions (0x28), device_ordinal (0x08) only when set; then
    // compile_portable_executable (field 4, tag 0x20) for single-device programs.
    CompileOptions defaults;
    CHECK(hex(defaults.serialize()) == "1a04200128012001");
    CompileOptions set;
    set.device_ordinal = 1;
    set.num_replicas = 2;
    set.num_partitions = 300;  // two-byte varint: ac 02
    CHECK(hex(set.serialize()) == "1a070801200228ac02");  // 2 replicas: not portable
    CompileOptions ordinal0;
    ordinal0.device_ordinal = 0;
    CHECK(hex(ordinal0.serialize()) == "1a060800200128012001");
  });

  section("small array", [] {
    SmallArray<int, 4> few(3, 7);
    CHECK(few.size() == 3 && few.on_stack());
    CHECK(few[0] == 7 && few[2] == 7);
    few[1] = 5;
    int sum = 0;
    for (int v : few) sum += v;
    CHECK(sum == 19);
    SmallArray<int, 4> exact(4, 1);
    CHECK(exact.on_stack() && exact.size() == 4);
    SmallArray<int, 4> many(9, 2);
    CHECK(many.size() == 9 && !many.on_stack());
    many[8] = 3;
    CHECK(many.data()[8] == 3 && many[0] == 2);
    SmallArray<const char*, 2> none(0);
    CHECK(none.size() == 0 && none.begin() == none.end());
  });

  section("plugin load errors", [] {
    std::unique_ptr<Error> err;
    CHECK_THROWS(Plugin::load("/nonexistent.so"), err);
    if (err) {
      std::printf("   message: %s\n", err->what());
      CHECK(err->code() == PJRT_Error_Code_NOT_FOUND);
      CHECK(contains(err->what(), "/nonexistent.so"));
      CHECK(contains(err->what(), "TORCH_TPU_PLATFORM"));
    }
    // A real library without GetPjrtApi is not a plugin.
    err.reset();
    CHECK_THROWS(Plugin::load("libc.so.6"), err);
    if (err) CHECK(contains(err->what(), "GetPjrtApi"));
  });

  std::shared_ptr<Plugin> plugin;
  std::shared_ptr<Client> client;
  section("plugin + client", [&] {
    plugin = Plugin::load(plugin_path);
    CHECK(plugin != nullptr);
    CHECK(plugin->api() != nullptr);
    CHECK(plugin->path() == plugin_path);
    CHECK(plugin->api_major() == PJRT_API_MAJOR);
    std::printf("   plugin API %d.%d (header %d.%d)\n", plugin->api_major(), plugin->api_minor(),
                PJRT_API_MAJOR, PJRT_API_MINOR);
    // Loading twice yields the same object (PJRT_Plugin_Initialize runs once).
    CHECK(Plugin::load(plugin_path) == plugin);

    client = Client::create(plugin, {{"cpu_device_count", int64_t{2}}});
    CHECK(client->device_count() == 2);
    CHECK(client->platform_name() == "cpu");
    std::printf("   platform %s, version '%s'\n", client->platform_name().c_str(),
                client->platform_version().c_str());
    for (const auto& d : client->devices()) {
      std::printf("   device id=%d hw=%d kind='%s' debug='%s'\n", d.id, d.local_hardware_id,
                  d.kind.c_str(), d.debug_string.c_str());
    }
    if (client->device_count() == 2) {
      CHECK(client->devices()[0].id != client->devices()[1].id);
      CHECK(client->raw_device(0) != client->raw_device(1));
    }
    std::unique_ptr<Error> err;
    CHECK_THROWS(client->raw_device(7), err);
  });
  if (!client || client->device_count() < 2) {
    std::printf("no usable client; stopping\n");
    ++cpp_check::failed;
    return cpp_check::report();
  }

  section("f32 round trip + metadata", [&] {
    std::vector<float> host = {1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f};
    auto buf = client->buffer_from_host(host.data(), PJRT_Buffer_Type_F32, {2, 3}, 1);
    buf->await_ready();
    CHECK(buf->element_type() == PJRT_Buffer_Type_F32);
    CHECK(buf->dims() == (std::vector<int64_t>{2, 3}));
    CHECK(buf->device_id() == 1);
    CHECK(buf->on_device_size() >= host.size() * sizeof(float));
    CHECK(!buf->is_deleted());
    CHECK(buf->ready_event()->is_ready());
    host.assign(host.size(), 99.f);  // kImmutableOnlyDuringCall: already copied
    auto back = read_f32(*buf, 6);
    CHECK(back == (std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f}));
    std::unique_ptr<Error> err;
    CHECK_THROWS(buf->to_host(back.data(), 5 * sizeof(float)), err);
    CHECK_THROWS(client->buffer_from_host(host.data(), PJRT_Buffer_Type_F32, {6}, 5), err);
  });

  section("int32 / bool / bf16 / rank-0 round trips", [&] {
    std::vector<int32_t> i32 = {1, -2, 2147483647, -2147483647 - 1};
    auto bi = client->buffer_from_host(i32.data(), PJRT_Buffer_Type_S32, {4}, 0);
    std::vector<int32_t> i32_back(4);
    bi->to_host(i32_back.data(), 16);
    CHECK(i32_back == i32);
    CHECK(bi->element_type() == PJRT_Buffer_Type_S32);

    bool pred[5] = {true, false, false, true, true};
    auto bp = client->buffer_from_host(pred, PJRT_Buffer_Type_PRED, {5}, 0);
    bool pred_back[5] = {};
    bp->to_host(pred_back, sizeof(pred_back));
    CHECK(std::memcmp(pred, pred_back, sizeof(pred)) == 0);
    CHECK(bp->element_type() == PJRT_Buffer_Type_PRED);

    std::vector<uint16_t> bf = {to_bf16(1.f), to_bf16(-0.5f), to_bf16(256.f)};
    auto bb = client->buffer_from_host(bf.data(), PJRT_Buffer_Type_BF16, {3, 1}, 1);
    std::vector<uint16_t> bf_back(3);
    bb->to_host(bf_back.data(), 6);
    CHECK(bf_back == bf);
    CHECK(bb->element_type() == PJRT_Buffer_Type_BF16);
    CHECK(bb->dims() == (std::vector<int64_t>{3, 1}));

    float scalar = 42.5f;
    auto bs = client->buffer_from_host(&scalar, PJRT_Buffer_Type_F32, {}, 0);
    CHECK(bs->dims().empty());
    float scalar_back = 0;
    bs->to_host(&scalar_back, sizeof(float));
    CHECK(scalar_back == 42.5f);
  });

  std::shared_ptr<Executable> add;
  section("compile: generic vs pretty func.return", [&] {
    try {
      add = client->compile(kAddGeneric);
      std::printf("   generic \"func.return\"(...) : ... -> (): ACCEPTED\n");
    } catch (const Error& e) {
      std::printf("   generic \"func.return\": REJECTED: %s\n", e.what());
    }
    try {
      auto pretty = client->compile(kAddPrettyReturn);
      std::printf("   pretty `return %%0 : tensor<4xf32>`: ACCEPTED\n");
      if (!add) add = pretty;
    } catch (const Error& e) {
      std::printf("   pretty `return`: REJECTED: %s\n", e.what());
    }
    CHECK(add != nullptr);
    if (add) {
      CHECK(add->num_outputs() == 1);
      std::printf("   fingerprint: '%s'\n", add->fingerprint().c_str());
    }
  });

  auto run_add = [&](const Executable& exe, int device, float bias) {
    std::vector<float> a = {1, 2, 3, 4}, b = {bias, bias, bias, bias};
    auto ba = client->buffer_from_host(a.data(), PJRT_Buffer_Type_F32, {4}, device);
    auto bb = client->buffer_from_host(b.data(), PJRT_Buffer_Type_F32, {4}, device);
    auto out = exe.execute({ba.get(), bb.get()}, device);
    CHECK(out.size() == 1);
    if (out.size() != 1) return;
    CHECK(out[0]->device_id() == device);
    CHECK(out[0]->dims() == (std::vector<int64_t>{4}));
    CHECK(read_f32(*out[0], 4) == (std::vector<float>{1 + bias, 2 + bias, 3 + bias, 4 + bias}));
    CHECK(!ba->is_deleted() && !bb->is_deleted());  // not donated
  };

  section("execute on device 0 and 1", [&] {
    if (!add) return;
    run_add(*add, 0, 10.f);
    run_add(*add, 1, 20.f);
    // Explicit options (device_ordinal set) still give a working executable.
    CompileOptions opts;
    opts.device_ordinal = 1;
    auto pinned = client->compile(kAddGeneric, opts);
    run_add(*pinned, 1, 2.f);
    run_add(*pinned, 0, 3.f);
    std::unique_ptr<Error> err;
    CHECK_THROWS(add->execute({}, 0), err);  // wrong argument count
    if (err) std::printf("   wrong-arity message: %s\n", err->what());
  });

  section("serialize + deserialize", [&] {
    if (!add) return;
    std::string bytes = add->serialize();
    CHECK(!bytes.empty());
    std::printf("   serialized %zu bytes\n", bytes.size());
    auto again = client->deserialize(bytes);
    CHECK(again->num_outputs() == 1);
    run_add(*again, 0, 5.f);
    run_add(*again, 1, -1.f);
    std::unique_ptr<Error> err;
    CHECK_THROWS(client->deserialize("definitely not an executable"), err);
  });

  section("donation", [&] {
    auto exe = client->compile(kDonatingDouble);
    std::vector<float> a = {1, 2, 3, 4};
    // Not in `donate`: input must survive even though the program aliases it.
    auto kept = client->buffer_from_host(a.data(), PJRT_Buffer_Type_F32, {4}, 1);
    auto out1 = exe->execute({kept.get()}, 1);
    CHECK(read_f32(*out1[0], 4) == (std::vector<float>{2, 4, 6, 8}));
    CHECK(!kept->is_deleted());
    CHECK(read_f32(*kept, 4) == a);
    // Donated: PJRT consumes the input buffer.
    auto given = client->buffer_from_host(a.data(), PJRT_Buffer_Type_F32, {4}, 1);
    auto out2 = exe->execute({given.get()}, 1, {0});
    CHECK(given->is_deleted());
    CHECK(read_f32(*out2[0], 4) == (std::vector<float>{2, 4, 6, 8}));
    CHECK(out2[0]->device_id() == 1);
  });

  section("rank-0 program with two outputs", [&] {
    auto exe = client->compile(kScalarTwoOutputs);
    CHECK(exe->num_outputs() == 2);
    float x = 3.f;
    auto bx = client->buffer_from_host(&x, PJRT_Buffer_Type_F32, {}, 0);
    auto out = exe->execute({bx.get()}, 0);
    CHECK(out.size() == 2);
    if (out.size() == 2) {
      float sq = 0, tw = 0;
      out[0]->to_host(&sq, 4);
      out[1]->to_host(&tw, 4);
      CHECK(sq == 9.f && tw == 6.f);
      CHECK(out[0]->dims().empty());
    }
  });

  section("more than 8 inputs and outputs", [&] {
    const int n = 11;
    auto exe = client->compile(many_in_out(n));
    CHECK(exe->num_outputs() == static_cast<size_t>(n));
    std::vector<std::shared_ptr<Buffer>> held;
    std::vector<Buffer*> args;
    for (int i = 0; i < n; ++i) {
      float x = static_cast<float>(i) + 0.5f;
      held.push_back(client->buffer_from_host(&x, PJRT_Buffer_Type_F32, {}, 0));
      args.push_back(held.back().get());
    }
    auto out = exe->execute(args, 0);
    CHECK(out.size() == static_cast<size_t>(n));
    bool all = out.size() == static_cast<size_t>(n);
    for (size_t i = 0; all && i < out.size(); ++i) {
      float y = 0;
      out[i]->to_host(&y, 4);
      all = y == 2.f * (static_cast<float>(i) + 0.5f);
    }
    CHECK(all);
  });

  section("compile errors", [&] {
    std::unique_ptr<Error> err;
    CHECK_THROWS(client->compile("this is not MLIR"), err);
    if (err) std::printf("   parse error (code %d): %.200s\n", err->code(), err->what());
    err.reset();
    // Parses, but types do not match.
    CHECK_THROWS(client->compile(R"(module @m {
  func.func public @main(%a: tensor<4xf32>, %b: tensor<3xf32>) -> tensor<4xf32> {
    %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }
})"),
                 err);
    if (err) std::printf("   verify error (code %d): %.200s\n", err->code(), err->what());
    // The client is still usable afterwards.
    if (add) run_add(*add, 0, 1.f);
  });

  section("cross-device input (informational)", [&] {
    if (!add) return;
    std::vector<float> a = {1, 2, 3, 4};
    auto on0 = client->buffer_from_host(a.data(), PJRT_Buffer_Type_F32, {4}, 0);
    try {
      auto out = add->execute({on0.get(), on0.get()}, 1);
      std::printf("   inputs on device 0, run on device 1: accepted, output on device %d\n",
                  out[0]->device_id());
      out[0]->await_ready();
    } catch (const Error& e) {
      std::printf("   inputs on device 0, run on device 1: rejected: %s\n", e.what());
    }
  });

  section("asynchrony (informational)", [&] {
    auto exe = client->compile(kBigDot);
    std::vector<float> a(1024 * 1024, 0.001f);
    auto ba = client->buffer_from_host(a.data(), PJRT_Buffer_Type_F32, {1024, 1024}, 0);
    auto t0 = std::chrono::steady_clock::now();
    auto out = exe->execute({ba.get()}, 0);
    auto t1 = std::chrono::steady_clock::now();
    bool ready_at_return = out[0]->ready_event()->is_ready();
    out[0]->await_ready();
    auto t2 = std::chrono::steady_clock::now();
    auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
    std::printf("   execute() returned after %.2f ms, output ready_at_return=%d, ready after %.2f ms\n",
                ms(t1 - t0), ready_at_return ? 1 : 0, ms(t2 - t0));
    std::vector<float> r(1024 * 1024);
    out[0]->to_host(r.data(), r.size() * 4);
    // (a*a)*a with a = 0.001 everywhere: 1024^2 * 1e-9.
    CHECK(std::fabs(r[0] - 1024.f * 1024.f * 1e-9f) < 1e-6f);
  });

  return cpp_check::report();
}

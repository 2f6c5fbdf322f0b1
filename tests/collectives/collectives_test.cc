// Unit test of the in-program collectives (csrc/hlo/builder_collectives.cc):
// programs built with hlo::Builder, compiled with num_replicas = 4 and run on
// the CPU plugin's 4 devices of one client (csrc/pjrt execute_replicated);
// results compared with values computed here.
//
// Usage: collectives_test <cpu plugin .so>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cpp_check.h"
#include "hlo/builder.h"
#include "pjrt/pjrt.h"

using namespace tpu;
using hlo::ElemType;
using hlo::TensorType;
using hlo::Value;

namespace {

constexpr int kReplicas = 4;

std::shared_ptr<pjrt::Client> g_client;

using Program = std::function<Value(hlo::Builder&, Value)>;

// Builds `f` over one f32 parameter of `dims`, runs it on every replica with
// replica r's input inputs[r]; returns each replica's f32 output.
std::vector<std::vector<float>> run(const std::vector<int64_t>& dims,
                                    const std::vector<std::vector<float>>& inputs, Program f) {
  hlo::Builder b;
  Value x = b.parameter(TensorType{ElemType::F32, dims});
  Value y = f(b, x);
  b.ret({y});
  pjrt::CompileOptions opts;
  opts.num_replicas = kReplicas;
  auto exe = g_client->compile(b.module_text(), opts);
  std::vector<std::shared_ptr<pjrt::Buffer>> keep;
  std::vector<std::vector<pjrt::Buffer*>> args(kReplicas);
  for (int r = 0; r < kReplicas; ++r) {
    keep.push_back(g_client->buffer_from_host(inputs[r].data(), PJRT_Buffer_Type_F32, dims, r));
    args[r] = {keep.back().get()};
  }
  auto outs = exe->execute_replicated(args);
  std::vector<std::vector<float>> result(kReplicas);
  int64_t n = y.type.numel();
  for (int r = 0; r < kReplicas; ++r) {
    CHECK(outs[r].size() == 1);
    result[r].resize(n);
    outs[r][0]->to_host(result[r].data(), n * sizeof(float));
  }
  return result;
}

// Replica r holds r*10 + i at position i.
std::vector<std::vector<float>> inputs(int64_t n) {
  std::vector<std::vector<float>> in(kReplicas);
  for (int r = 0; r < kReplicas; ++r)
    for (int64_t i = 0; i < n; ++i) in[r].push_back(static_cast<float>(r * 10 + i));
  return in;
}

bool throws(const std::function<void()>& f, const std::string& part) {
  return cpp_check::throws<std::invalid_argument>(f, part);
}

using cpp_check::section;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <cpu pjrt plugin .so>\n", argv[0]);
    return 2;
  }
  auto plugin = pjrt::Plugin::load(argv[1]);
  g_client = pjrt::Client::create(plugin, {{"cpu_device_count", int64_t{kReplicas}}});
  CHECK(g_client->device_count() == kReplicas);
  const std::vector<std::vector<int64_t>> all{{0, 1, 2, 3}}, pairs{{0, 1}, {2, 3}};

  section("all_reduce", [&] {
    auto in = inputs(3);
    auto sum = run({3}, in, [&](hlo::Builder& b, Value x) {
      return b.all_reduce(x, hlo::ReduceOp::Add, all);
    });
    for (int r = 0; r < kReplicas; ++r)
      for (int i = 0; i < 3; ++i) CHECK(sum[r][i] == 60.0f + 4 * i);
    auto mx = run({3}, in, [&](hlo::Builder& b, Value x) {
      return b.all_reduce(x, hlo::ReduceOp::Max, pairs);
    });
    for (int r = 0; r < kReplicas; ++r)
      for (int i = 0; i < 3; ++i) CHECK(mx[r][i] == static_cast<float>((r | 1) * 10 + i));
  });

  section("all_gather", [&] {
    auto out = run({2}, inputs(2), [&](hlo::Builder& b, Value x) {
      return b.all_gather(x, 0, pairs);
    });
    for (int r = 0; r < kReplicas; ++r) {
      int lo = r & ~1;
      std::vector<float> want{lo * 10.0f, lo * 10.0f + 1, (lo + 1) * 10.0f, (lo + 1) * 10.0f + 1};
      CHECK(out[r] == want);
    }
  });

  section("reduce_scatter", [&] {
    auto out = run({4}, inputs(4), [&](hlo::Builder& b, Value x) {
      return b.reduce_scatter(x, 0, hlo::ReduceOp::Add, all);
    });
    for (int r = 0; r < kReplicas; ++r) CHECK(out[r] == std::vector<float>{60.0f + 4 * r});
  });

  section("all_to_all", [&] {
    auto out = run({4}, inputs(4), [&](hlo::Builder& b, Value x) {
      return b.all_to_all(x, 0, 0, all);
    });
    for (int r = 0; r < kReplicas; ++r) {
      std::vector<float> want;
      for (int k = 0; k < kReplicas; ++k) want.push_back(static_cast<float>(k * 10 + r));
      CHECK(out[r] == want);
    }
  });

  section("collective_permute", [&] {
    auto out = run({2}, inputs(2), [&](hlo::Builder& b, Value x) {
      return b.collective_permute(x, {{0, 1}, {1, 2}, {2, 3}, {3, 0}});  // a ring
    });
    for (int r = 0; r < kReplicas; ++r) {
      int src = (r + kReplicas - 1) % kReplicas;
      CHECK(out[r] == (std::vector<float>{src * 10.0f, src * 10.0f + 1}));
    }
  });

  section("bad arguments fail at build time", [&] {
    hlo::Builder b;
    Value x = b.parameter(TensorType{ElemType::F32, {3}});
    CHECK(throws([&] { b.all_reduce(x, hlo::ReduceOp::Add, {}); }, "replica group"));
    CHECK(throws([&] { b.all_reduce(x, hlo::ReduceOp::Add, {{0, 1}, {1, 2}}); }, "two groups"));
    CHECK(throws([&] { b.all_reduce(x, hlo::ReduceOp::And, all); }, "integer"));
    CHECK(throws([&] { b.reduce_scatter(x, 0, hlo::ReduceOp::Add, all); }, "does not split"));
    CHECK(throws([&] { b.all_gather(x, 1, all); }, "out of range"));
    CHECK(throws([&] { b.collective_permute(x, {{0, 1}, {2, 1}}); }, "receives twice"));
  });

  return cpp_check::report();
}

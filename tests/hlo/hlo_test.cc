// Unit tests of csrc/hlo: every builder op is compiled and run on the real XLA
// CPU plugin (path in argv[1] or $PJRT_PLUGIN_PATH) and its numbers checked, so
// the emitted MLIR is proven acceptable to the compiler, not just plausible text.
// Structural tests (types, errors, fingerprints) need no plugin.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "../cpp_check.h"
#include "hlo/builder.h"
#include "hlo/call_module.h"
#include "pjrt_runner.h"

using namespace tpu::hlo;
using hlo_test::HostArray;

namespace {

hlo_test::Runner* g_runner = nullptr;

// Expects std::invalid_argument whose message starts with `prefix`.
#define CHECK_THROWS(expr, prefix) \
  CHECK(::cpp_check::throws<std::invalid_argument>([&] { expr; }, prefix, /*prefix=*/true))

template <class T>
HostArray arr(ElemType e, std::vector<int64_t> dims, const std::vector<T>& v) {
  HostArray a{e, std::move(dims), {}};
  a.bytes.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
  return a;
}

template <class T>
std::vector<T> get(const std::vector<uint8_t>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

std::vector<float> range_f(int n, float start = 0) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

bool near(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * (1 + std::fabs(want[i])))) {
      std::fprintf(stderr, "  [%zu] got %g want %g\n", i, got[i], want[i]);
      return false;
    }
  return true;
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Compiles and runs the finished module; throws with the module text on error.
std::vector<std::vector<uint8_t>> exec(const Builder& b, const std::vector<HostArray>& in,
                                       size_t nout) {
  std::vector<std::vector<uint8_t>> out;
  std::string text = b.module_text();
  if (std::getenv("HLO_TEST_DUMP")) std::printf("%s", text.c_str());  // for debugging
  std::string err = g_runner->run(text, in, nout, &out);
  if (!err.empty()) throw std::runtime_error(err + "\n--- module ---\n" + text);
  return out;
}

const TensorType F32_4{ElemType::F32, {4}};

// ---- runtime tests ---------------------------------------------------------------

void test_elementwise() {
  Builder b("elementwise");
  Value x = b.parameter(F32_4), y = b.parameter(F32_4);
  Value lt = b.compare(x, y, Cmp::LT);
  Value sel = b.select(lt, x, y);
  Value prod = b.mul(x, y);
  Value conv = b.convert(prod, ElemType::S32);
  Value scalar_sel = b.select(b.constant_i(0, ElemType::PRED), x, y);  // rank-0 predicate
  Value mixed = b.sub(b.div(b.max(x, y), b.min(x, y)), b.neg(x));
  b.ret({b.add(x, y), prod, lt, sel, conv, scalar_sel, mixed});
  auto o = exec(b, {arr<float>(ElemType::F32, {4}, {1, 2, 3, 4}),
                    arr<float>(ElemType::F32, {4}, {4, 3, 2, 1})}, 7);
  CHECK(near(get<float>(o[0]), {5, 5, 5, 5}));
  CHECK(near(get<float>(o[1]), {4, 6, 6, 4}));
  CHECK((get<uint8_t>(o[2]) == std::vector<uint8_t>{1, 1, 0, 0}));
  CHECK(near(get<float>(o[3]), {1, 2, 2, 1}));
  CHECK((get<int32_t>(o[4]) == std::vector<int32_t>{4, 6, 6, 4}));
  CHECK(near(get<float>(o[5]), {4, 3, 2, 1}));
  CHECK(near(get<float>(o[6]), {4 + 1.f, 1.5f + 2, 1.5f + 3, 4 + 4.f}));
}

void test_unary_and_bits() {
  Builder b("unary");
  Value x = b.parameter(TensorType{ElemType::F32, {3}});
  Value i = b.parameter(TensorType{ElemType::S32, {3}});
  Value e = b.unary("exponential", x);
  Value fin = b.unary("is_finite", b.div(x, x));  // 0/0 -> nan
  Value bits = b.bitcast_convert(x, TensorType{ElemType::S32, {3}});
  Value pc = b.unary("popcnt", i);
  Value sh = b.binary("shift_left", i, b.splat_i(2, i.type));
  Value halves = b.bitcast_convert(x, TensorType{ElemType::U16, {3, 2}});  // wide -> narrow
  Value cplx = b.binary("complex", x, x);
  Value absc = b.unary("abs", cplx);  // complex abs is real
  b.ret({e, fin, bits, pc, sh, halves, absc});
  auto o = exec(b, {arr<float>(ElemType::F32, {3}, {0, 1, 2}),
                    arr<int32_t>(ElemType::S32, {3}, {7, 1, 0})}, 7);
  CHECK(near(get<float>(o[0]), {1, std::exp(1.f), std::exp(2.f)}));
  CHECK((get<uint8_t>(o[1]) == std::vector<uint8_t>{0, 1, 1}));
  CHECK((get<int32_t>(o[2])[1] == 0x3F800000));
  CHECK((get<int32_t>(o[3]) == std::vector<int32_t>{3, 1, 0}));
  CHECK((get<int32_t>(o[4]) == std::vector<int32_t>{28, 4, 0}));
  CHECK(o[5].size() == 12);
  CHECK(near(get<float>(o[6]), {0, std::sqrt(2.f), 2 * std::sqrt(2.f)}));
}

void test_constants() {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Builder b("constants");
  std::vector<Value> r;
  r.push_back(b.constant_f(inf, ElemType::F32));                 // 0
  r.push_back(b.constant_f(-inf, ElemType::F32));                // 1
  r.push_back(b.constant_f(nan, ElemType::F32));                 // 2
  r.push_back(b.constant_f(0.1, ElemType::BF16));                // 3
  r.push_back(b.convert(b.constant_f(0.1, ElemType::BF16), ElemType::F32));  // 4
  r.push_back(b.constant_f(inf, ElemType::BF16));                // 5
  r.push_back(b.constant_f(1.0 / 3, ElemType::F16));             // 6
  r.push_back(b.constant_f(65504, ElemType::F16));               // 7
  r.push_back(b.constant_f(1e6, ElemType::F16));                 // 8 overflow -> inf
  r.push_back(b.constant_f(0.1, ElemType::F64));                 // 9
  r.push_back(b.constant_f(0.1, ElemType::F32));                 // 10
  r.push_back(b.constant_f(-0.0, ElemType::F32));                // 11
  r.push_back(b.constant_f(1e-45, ElemType::F32));               // 12 smallest subnormal
  r.push_back(b.constant_i(-1, ElemType::U8));                   // 13 wraps to 255
  r.push_back(b.constant_i((int64_t{1} << 40) + 5, ElemType::S32));  // 14 wraps to 5
  r.push_back(b.constant_i(-1, ElemType::U64));                  // 15
  r.push_back(b.constant_i(1, ElemType::PRED));                  // 16
  r.push_back(b.unary("real", b.constant_f(2.5, ElemType::C64)));  // 17
  r.push_back(b.dense_f({1, inf, -2.5, nan}, TensorType{ElemType::F32, {2, 2}}));  // 18
  r.push_back(b.dense_i({1, 2, 3, 4, 5, 6}, TensorType{ElemType::S32, {2, 3}}));   // 19
  r.push_back(b.splat_f(3.0, TensorType{ElemType::F32, {2, 2}}));  // 20
  r.push_back(b.constant_f(3.0, ElemType::S32));                  // 21
  r.push_back(b.constant_f(1e30, ElemType::F64));                 // 22
  r.push_back(b.constant_f(nan, ElemType::BF16));                 // 23
  r.push_back(b.dense_f({0.1, -inf, 1.5}, TensorType{ElemType::BF16, {3}}));  // 24
  r.push_back(b.constant_f(5.960464477539063e-08, ElemType::F16));  // 25 f16 subnormal
  r.push_back(b.constant_f(1e-40, ElemType::BF16));               // 26 bf16 subnormal -> hex
  r.push_back(b.constant_f(123456789.0, ElemType::F32));          // 27
  r.push_back(b.constant_f(3.14159265358979, ElemType::F64));     // 28
  r.push_back(b.unary("real", b.constant_f(-inf, ElemType::C128)));  // 29
  r.push_back(b.constant_f(-1234.0, ElemType::F16));             // 30
  r.push_back(b.dense_f({1e300, -0.0}, TensorType{ElemType::F64, {2}}));  // 31
  b.ret(r);
  auto o = exec(b, {}, r.size());
  CHECK(std::isinf(get<float>(o[0])[0]) && get<float>(o[0])[0] > 0);
  CHECK(std::isinf(get<float>(o[1])[0]) && get<float>(o[1])[0] < 0);
  CHECK(std::isnan(get<float>(o[2])[0]));
  CHECK(get<uint16_t>(o[3])[0] == 0x3DCD);
  CHECK(get<float>(o[4])[0] == 0.10009765625f);
  CHECK(get<uint16_t>(o[5])[0] == 0x7F80);
  CHECK(get<uint16_t>(o[6])[0] == 0x3555);
  CHECK(get<uint16_t>(o[7])[0] == 0x7BFF);
  CHECK(get<uint16_t>(o[8])[0] == 0x7C00);
  CHECK(get<double>(o[9])[0] == 0.1);
  CHECK(get<float>(o[10])[0] == 0.1f);
  CHECK(f32_bits(get<float>(o[11])[0]) == 0x80000000u);
  CHECK(f32_bits(get<float>(o[12])[0]) == 1u);
  CHECK(get<uint8_t>(o[13])[0] == 255);
  CHECK(get<int32_t>(o[14])[0] == 5);
  CHECK(get<uint64_t>(o[15])[0] == ~uint64_t{0});
  CHECK(get<uint8_t>(o[16])[0] == 1);
  CHECK(get<float>(o[17])[0] == 2.5f);
  auto d = get<float>(o[18]);
  CHECK(d.size() == 4 && d[0] == 1 && std::isinf(d[1]) && d[2] == -2.5f && std::isnan(d[3]));
  CHECK((get<int32_t>(o[19]) == std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  CHECK(near(get<float>(o[20]), {3, 3, 3, 3}));
  CHECK(get<int32_t>(o[21])[0] == 3);
  CHECK(get<double>(o[22])[0] == 1e30);
  CHECK((get<uint16_t>(o[23])[0] & 0x7F80) == 0x7F80 && (get<uint16_t>(o[23])[0] & 0x7F));
  CHECK((get<uint16_t>(o[24]) == std::vector<uint16_t>{0x3DCD, 0xFF80, 0x3FC0}));
  CHECK(get<uint16_t>(o[25])[0] == 0x0001);
  CHECK(get<uint16_t>(o[26])[0] == 0x0001);  // 1e-40 / 2^-133 rounds to 1
  CHECK(get<float>(o[27])[0] == 123456789.0f);
  CHECK(get<double>(o[28])[0] == 3.14159265358979);
  CHECK(std::isinf(get<double>(o[29])[0]) && get<double>(o[29])[0] < 0);
  CHECK(get<uint16_t>(o[30])[0] == 0xE4D2);
  auto d64 = get<double>(o[31]);
  CHECK(d64.size() == 2 && d64[0] == 1e300 && d64[1] == 0 && std::signbit(d64[1]));
  const std::string text = b.module_text();
  CHECK(text.find("dense<-1234.0> : tensor<f16>") != std::string::npos);
  CHECK(text.find("dense<0x7F800000> : tensor<f32>") != std::string::npos);
}

void test_float8_constants() {
  // float8 constants print as their bits, rounded as PyTorch's casts round.
  CHECK(float8_bits(1.0f, ElemType::F8E4M3FN) == 0x38);
  CHECK(float8_bits(500.0f, ElemType::F8E4M3FN) == 0x7E);    // saturates at 448
  CHECK(float8_bits(-INFINITY, ElemType::F8E4M3FN) == 0xFE);
  CHECK(float8_bits(-NAN, ElemType::F8E4M3FN) == 0xFF);
  CHECK(float8_bits(61440.0f, ElemType::F8E5M2) == 0x7C);     // rounds up to inf
  CHECK(float8_bits(57344.0f, ElemType::F8E5M2) == 0x7B);
  CHECK(float8_bits(3 * 0x1p-10f, ElemType::F8E4M3FN) == 0x02);  // subnormal ties to even
  CHECK(float8_bits(0x1p-10f, ElemType::F8E4M3FN) == 0x00);
  CHECK(float8_bits(-0.0f, ElemType::F8E4M3FNUZ) == 0x00);    // fnuz: no -0
  CHECK(float8_bits(250.0f, ElemType::F8E4M3FNUZ) == 0x80);   // fnuz overflow: NaN
  CHECK(float8_bits(1e-40f, ElemType::F8E5M2FNUZ) == 0x00);
  Builder b("f8");
  b.ret({b.constant_f(500.0, ElemType::F8E4M3FN), b.constant_f(-0.0, ElemType::F8E5M2)});
  const std::string text = b.module_text();
  CHECK(text.find("dense<0x7E> : tensor<f8E4M3FN>") != std::string::npos);
  CHECK(text.find("dense<0x80> : tensor<f8E5M2>") != std::string::npos);
  CHECK(bit_width(ElemType::F8E5M2FNUZ) == 8 && is_float(ElemType::F8E4M3FN));
}

void test_empty_and_signature() {
  // Zero-element constants and a function without parameters or results compile.
  Builder b("empty");
  Value z = b.splat_f(1.0, TensorType{ElemType::F32, {0, 3}});
  Value zi = b.dense_i({}, TensorType{ElemType::S32, {0}});
  (void)zi;
  b.ret({z});
  CHECK(g_runner->compile(b.module_text()).empty());
  Builder n;
  n.ret({});
  std::string err = g_runner->compile(n.module_text());
  if (!err.empty()) std::fprintf(stderr, "  %s\n%s", err.c_str(), n.module_text().c_str());
  CHECK(err.empty());
}

void test_generic_and_bf16() {
  Builder b("generic");
  Value x = b.parameter(TensorType{ElemType::F32, {3}});
  Value h = b.parameter(TensorType{ElemType::BF16, {3}});
  Value rp = b.generic("stablehlo.reduce_precision", {x},
                       "exponent_bits = 5 : i32, mantissa_bits = 2 : i32", x.type);
  Value cb = b.generic("cbrt", {x}, "", x.type);  // prefix added
  auto ob = b.generic_multi("stablehlo.optimization_barrier", {x, h}, "", {x.type, h.type});
  Value hs = b.add(h, b.splat_f(0.5, h.type));
  b.ret({rp, cb, ob[1], b.convert(hs, ElemType::F32)});
  // bf16 host data: 1.0, 2.0, -3.0
  auto o = exec(b, {arr<float>(ElemType::F32, {3}, {1.1f, 8, 27}),
                    arr<uint16_t>(ElemType::BF16, {3}, {0x3F80, 0x4000, 0xC040})}, 4);
  CHECK(near(get<float>(o[0]), {1.0f, 8, 28}));
  CHECK(near(get<float>(o[1]), {std::cbrt(1.1f), 2, 3}));
  CHECK((get<uint16_t>(o[2]) == std::vector<uint16_t>{0x3F80, 0x4000, 0xC040}));
  CHECK(near(get<float>(o[3]), {1.5f, 2.5f, -2.5f}));
}

// A JAX-style module (attributes, a private helper) inlined twice: appended once.
void test_call_module() {
  const std::string m = R"(module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<3xf32> {mhlo.sharding = "{replicated}"}, %arg1: tensor<3xf32>) -> (tensor<3xf32> {jax.result_info = "result"}) {
    %0 = call @relu(%arg0) : (tensor<3xf32>) -> tensor<3xf32>
    %1 = stablehlo.multiply %0, %arg1 : tensor<3xf32> loc(#loc2)
    return %1 : tensor<3xf32>
  }
  func.func private @relu(%arg0: tensor<3xf32>) -> tensor<3xf32> {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<3xf32>
    %0 = stablehlo.maximum %arg0, %cst : tensor<3xf32>
    return %0 : tensor<3xf32>
  }
})";
  Builder b("call");
  Value x = b.parameter(TensorType{ElemType::F32, {3}});
  Value y = b.parameter(TensorType{ElemType::F32, {3}});
  Value r = call_module(b, m, {x, y})[0];
  Value r2 = call_module(b, m, {r, y})[0];
  b.ret({r2});
  const std::string text = b.module_text();
  size_t funcs = 0;
  for (size_t p = text.find("func.func private @k_"); p != std::string::npos;
       p = text.find("func.func private @k_", p + 1))
    ++funcs;
  CHECK(funcs == 2);  // @main and @relu of the module, once each
  CHECK(text.find("mhlo.sharding") == std::string::npos);
  auto o = exec(b, {arr<float>(ElemType::F32, {3}, {-1, 2, 3}),
                    arr<float>(ElemType::F32, {3}, {2, 2, -1})}, 1);
  // relu(relu(x) * y) * y
  CHECK(near(get<float>(o[0]), {0, 8, 0}));
  CHECK_THROWS(call_module(b, m, {x}), "call_module: @main takes 2 arguments");
  Builder c("bad");
  Value z = c.parameter(TensorType{ElemType::F32, {4}});
  CHECK_THROWS(call_module(c, m, {z, z}), "call_module: argument 0 of @main has type");
  CHECK(module_signature(m).results.at(0) == (TensorType{ElemType::F32, {3}}));
  CHECK_THROWS(parse_tensor_type("tensor<?x3xf32>"), "'tensor<?x3xf32>': dynamic");
}

void test_donation() {
  Builder b("donate");
  Value x = b.parameter(F32_4, 0);
  b.ret({b.add(x, x)});
  CHECK(b.module_text().find("{tf.aliasing_output = 0 : i32}") != std::string::npos);
  auto o = exec(b, {arr<float>(ElemType::F32, {4}, {1, 2, 3, 4})}, 1);
  CHECK(near(get<float>(o[0]), {2, 4, 6, 8}));
}

void test_shape() {
  Builder b("shape");
  Value v = b.parameter(TensorType{ElemType::F32, {3}});
  Value io = b.iota(TensorType{ElemType::S32, {2, 3}}, 1);
  Value t = b.transpose(io, {1, 0});
  Value r = b.reshape(t, {6});
  Value bc = b.broadcast_in_dim(v, {2, 3}, {1});
  Value bt = b.broadcast_to(b.reshape(v, {3, 1}), {2, 3, 4});
  Value col = b.broadcast_in_dim(b.slice(v, {0}, {2}, {1}), {2, 3}, {0});
  b.ret({io, t, r, bc, bt, col});
  auto o = exec(b, {arr<float>(ElemType::F32, {3}, {1, 2, 3})}, 6);
  CHECK((get<int32_t>(o[0]) == std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  CHECK((get<int32_t>(o[1]) == std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
  CHECK((get<int32_t>(o[2]) == std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
  CHECK(near(get<float>(o[3]), {1, 2, 3, 1, 2, 3}));
  auto btv = get<float>(o[4]);
  CHECK(btv.size() == 24 && btv[0] == 1 && btv[4] == 2 && btv[11] == 3 && btv[12] == 1);
  CHECK(near(get<float>(o[5]), {1, 1, 1, 2, 2, 2}));
}

void test_slicing() {
  Builder b("slicing");
  Value x = b.parameter(TensorType{ElemType::F32, {4, 4}});
  Value s = b.slice(x, {1, 0}, {3, 4}, {1, 2});
  Value ds = b.dynamic_slice(x, {b.constant_i(2, ElemType::S32), b.constant_i(1, ElemType::S32)},
                             {2, 2});
  Value dsc = b.dynamic_slice(x, {b.constant_i(3, ElemType::S64), b.constant_i(3, ElemType::S64)},
                              {2, 2});  // start clamped to (2, 2)
  Value dus = b.dynamic_update_slice(
      x, b.splat_f(100, TensorType{ElemType::F32, {1, 2}}),
      {b.constant_i(0, ElemType::S32), b.constant_i(1, ElemType::S32)});
  Value cat = b.concatenate({b.slice(x, {0, 0}, {1, 4}, {1, 1}), b.slice(x, {3, 0}, {4, 4}, {1, 1})},
                            0);
  Value row = b.reshape(b.slice(x, {0, 1}, {1, 3}, {1, 1}), {2});  // [1, 2]
  Value p = b.pad(row, b.constant_f(0, ElemType::F32), {1}, {2}, {1});
  Value pneg = b.pad(row, b.constant_f(0, ElemType::F32), {-1}, {0}, {0});
  Value rev = b.reverse(row, {0});
  b.ret({s, ds, dsc, dus, cat, p, pneg, rev});
  auto o = exec(b, {arr<float>(ElemType::F32, {4, 4}, range_f(16))}, 8);
  CHECK(near(get<float>(o[0]), {4, 6, 8, 10}));
  CHECK(near(get<float>(o[1]), {9, 10, 13, 14}));
  CHECK(near(get<float>(o[2]), {10, 11, 14, 15}));
  auto u = get<float>(o[3]);
  CHECK(u.size() == 16 && u[0] == 0 && u[1] == 100 && u[2] == 100 && u[3] == 3 && u[5] == 5);
  CHECK(near(get<float>(o[4]), {0, 1, 2, 3, 12, 13, 14, 15}));
  CHECK(near(get<float>(o[5]), {0, 1, 0, 2, 0, 0}));
  CHECK(near(get<float>(o[6]), {2}));
  CHECK(near(get<float>(o[7]), {2, 1}));
}

void test_dot() {
  Builder b("dot");
  Value a = b.parameter(TensorType{ElemType::F32, {2, 3}});
  Value c = b.parameter(TensorType{ElemType::F32, {3, 2}});
  Value ba = b.parameter(TensorType{ElemType::F32, {2, 2, 3}});
  Value bb = b.parameter(TensorType{ElemType::F32, {2, 3, 1}});
  Value mm = b.dot_general(a, c, {}, {}, {1}, {0}, ElemType::F32);
  Value bmm = b.dot_general(ba, bb, {0}, {0}, {2}, {1}, ElemType::F32);
  CHECK((bmm.dims() == std::vector<int64_t>{2, 2, 1}));
  Value outer = b.dot_general(b.reshape(a, {6}), b.reshape(a, {6}), {}, {}, {}, {}, ElemType::F32);
  CHECK((outer.dims() == std::vector<int64_t>{6, 6}));
  b.ret({mm, bmm, b.slice(outer, {1, 2}, {2, 3}, {1, 1})});
  auto o = exec(b, {arr<float>(ElemType::F32, {2, 3}, range_f(6, 1)),
                    arr<float>(ElemType::F32, {3, 2}, range_f(6, 1)),
                    arr<float>(ElemType::F32, {2, 2, 3}, range_f(12, 1)),
                    arr<float>(ElemType::F32, {2, 3, 1}, std::vector<float>(6, 1))}, 3);
  CHECK(near(get<float>(o[0]), {22, 28, 49, 64}));
  CHECK(near(get<float>(o[1]), {6, 15, 24, 33}));
  CHECK(near(get<float>(o[2]), {6}));
}

void test_reduce() {
  Builder b("reduce");
  Value x = b.parameter(TensorType{ElemType::F32, {2, 3}});
  Value sum = b.reduce(x, b.constant_f(0, ElemType::F32), {1}, ReduceOp::Add);
  Value mx = b.reduce(x, b.constant_f(-INFINITY, ElemType::F32), {0, 1}, ReduceOp::Max);
  Value idx = b.iota(TensorType{ElemType::S32, {2, 3}}, 1);
  // argmax: keep the larger value, the smaller index on ties.
  auto am = b.reduce({x, idx}, {b.constant_f(-INFINITY, ElemType::F32), b.constant_i(0, ElemType::S32)},
                     {1}, [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
                       Value gt = r.compare(a[2], a[0], Cmp::GT);
                       Value eq = r.compare(a[2], a[0], Cmp::EQ);
                       Value lower = r.compare(a[3], a[1], Cmp::LT);
                       Value take = r.binary("or", gt, r.binary("and", eq, lower));
                       return {r.select(take, a[2], a[0]), r.select(take, a[3], a[1])};
                     });
  b.ret({sum, mx, am[0], am[1]});
  auto o = exec(b, {arr<float>(ElemType::F32, {2, 3}, {1, 5, 3, 7, 2, 9})}, 4);
  CHECK(near(get<float>(o[0]), {9, 18}));
  CHECK(near(get<float>(o[1]), {9}));
  CHECK(near(get<float>(o[2]), {5, 9}));
  CHECK((get<int32_t>(o[3]) == std::vector<int32_t>{1, 2}));
}

// Max/min/and/or and integer sums over a dimension longer than 32 are reshaped
// into factors of at most 32 (XLA's CPU compiler would split each into a
// reduce_window and a reduce: two kernels); a dimension with a prime factor above
// 32, and float sums, stay as written.
// The answers must not change: values at both ends, partial and full. (NaN: XLA's
// maximum returns the non-NaN operand, in either order; PyTorch's NaN-propagating
// max is a lowering's own body, which is left as written.)
void test_reduce_long_dims() {
  Builder b("reduce_long");
  Value x = b.parameter(TensorType{ElemType::F32, {3, 128}});
  Value y = b.parameter(TensorType{ElemType::F32, {1000}});
  Value z = b.parameter(TensorType{ElemType::F32, {2, 74}});
  Value p = b.parameter(TensorType{ElemType::PRED, {4096}});
  Value row_max = b.reduce(x, b.constant_f(-INFINITY, ElemType::F32), {1}, ReduceOp::Max);
  Value all_min = b.reduce(y, b.constant_f(INFINITY, ElemType::F32), {0}, ReduceOp::Min);
  Value prime_max = b.reduce(z, b.constant_f(-INFINITY, ElemType::F32), {1}, ReduceOp::Max);
  Value any = b.reduce(p, b.constant_i(0, ElemType::PRED), {0}, ReduceOp::Or);
  Value all = b.reduce(p, b.constant_i(1, ElemType::PRED), {0}, ReduceOp::And);
  Value sum = b.reduce(x, b.constant_f(0, ElemType::F32), {1}, ReduceOp::Add);
  Value w = b.parameter(TensorType{ElemType::F32, {2, 1024}});
  Value long_sum = b.reduce(w, b.constant_f(0, ElemType::F32), {1}, ReduceOp::Add);
  Value k = b.parameter(TensorType{ElemType::S32, {2, 1024}});
  Value int_sum = b.reduce(k, b.constant_i(0, ElemType::S32), {1}, ReduceOp::Add);
  b.ret({row_max, all_min, prime_max, any, all, sum, long_sum, int_sum});
  const std::string text = b.module_text();
  CHECK(text.find("tensor<3x32x4xf32>") != std::string::npos);    // 128 = 32 x 4
  CHECK(text.find("tensor<25x20x2xf32>") != std::string::npos);  // 1000, full: variadic
  CHECK(text.find("tensor<2x2x37xf32>") == std::string::npos);    // 37 is prime: as written
  const std::string split_x = "(tensor<3x128xf32>) -> tensor<3x32x4xf32>";  // the reshape
  CHECK(text.find(split_x) == text.rfind(split_x));  // once: for the max, not for the sum
  CHECK(text.find("tensor<2x32x32xf32>") == std::string::npos);   // float sum: as written
  CHECK(text.find("tensor<2x32x32xi32>") != std::string::npos);   // integer sum: any length
  std::vector<float> xs(3 * 128), ys(1000), zs(2 * 74);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = std::sin(0.37f * i) * 100;
  xs[127] = 500;                 // row 0's max at its last element
  xs[128] = 600;                 // row 1's at its first
  xs[2 * 128 + 77] = 700;        // row 2's in the middle
  for (size_t i = 0; i < ys.size(); ++i) ys[i] = std::cos(0.11f * i) * 50;
  ys[999] = -70;
  for (size_t i = 0; i < zs.size(); ++i) zs[i] = static_cast<float>(i % 74);
  std::vector<uint8_t> ps(4096, 1);
  ps[4095] = 0;
  auto o = exec(b, {arr<float>(ElemType::F32, {3, 128}, xs), arr<float>(ElemType::F32, {1000}, ys),
                    arr<float>(ElemType::F32, {2, 74}, zs), arr<uint8_t>(ElemType::PRED, {4096}, ps),
                    arr<float>(ElemType::F32, {2, 1024}, std::vector<float>(2048, 0.5f)),
                    arr<int32_t>(ElemType::S32, {2, 1024}, std::vector<int32_t>(2048, 3))},
                8);
  auto rm = get<float>(o[0]);
  CHECK((rm == std::vector<float>{500, 600, 700}));
  CHECK((get<float>(o[1]) == std::vector<float>{-70}));
  CHECK((get<float>(o[2]) == std::vector<float>{73, 73}));
  CHECK((get<uint8_t>(o[3]) == std::vector<uint8_t>{1}));
  CHECK((get<uint8_t>(o[4]) == std::vector<uint8_t>{0}));
  float s0 = 0;
  for (int i = 0; i < 128; ++i) s0 += xs[i];
  CHECK(std::fabs(get<float>(o[5])[0] - s0) <= 1e-3f * (1 + std::fabs(s0)));
  CHECK((get<float>(o[6]) == std::vector<float>{512, 512}));
  CHECK((get<int32_t>(o[7]) == std::vector<int32_t>{3072, 3072}));
}

void test_windows() {
  Builder b("windows");
  Value img = b.parameter(TensorType{ElemType::F32, {1, 1, 4, 4}});
  Value x = b.parameter(TensorType{ElemType::F32, {4, 4}});
  Value src = b.parameter(TensorType{ElemType::F32, {2, 2}});
  Value ones = b.parameter(F32_4);
  Value pool = b.reduce_window(img, b.constant_f(-INFINITY, ElemType::F32), {1, 1, 2, 2},
                               {1, 1, 2, 2}, {}, {}, {}, ReduceOp::Max);
  Value sas = b.select_and_scatter(x, src, b.constant_f(0, ElemType::F32), {2, 2}, {2, 2}, {},
                                   Cmp::GE, ReduceOp::Add);
  Value padded = b.reduce_window(ones, b.constant_f(0, ElemType::F32), {3}, {1}, {}, {}, {{1, 1}},
                                 ReduceOp::Add);
  b.ret({pool, sas, padded});
  auto o = exec(b, {arr<float>(ElemType::F32, {1, 1, 4, 4}, range_f(16)),
                    arr<float>(ElemType::F32, {4, 4}, range_f(16)),
                    arr<float>(ElemType::F32, {2, 2}, {1, 2, 3, 4}),
                    arr<float>(ElemType::F32, {4}, {1, 1, 1, 1})}, 3);
  CHECK(near(get<float>(o[0]), {5, 7, 13, 15}));
  std::vector<float> want(16, 0);
  want[5] = 1, want[7] = 2, want[13] = 3, want[15] = 4;
  CHECK(near(get<float>(o[1]), want));
  CHECK(near(get<float>(o[2]), {2, 3, 3, 2}));
}

void test_gather_scatter() {
  Builder b("gather_scatter");
  Value table = b.parameter(TensorType{ElemType::F32, {5, 2}});
  Value idx = b.parameter(TensorType{ElemType::S32, {3}});
  Value zeros = b.parameter(TensorType{ElemType::F32, {5}});
  Value sidx = b.parameter(TensorType{ElemType::S32, {4, 1}});
  Value upd = b.parameter(F32_4);
  Builder::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  Value gat = b.gather(table, idx, g, {1, 2}, TensorType{ElemType::F32, {3, 2}});
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  const ReduceOp add = ReduceOp::Add;
  Value sadd = b.scatter(zeros, sidx, upd, s, &add);
  Value sset = b.scatter(zeros, sidx, upd, s, nullptr);
  b.ret({gat, sadd, sset});
  auto o = exec(b, {arr<float>(ElemType::F32, {5, 2}, range_f(10)),
                    arr<int32_t>(ElemType::S32, {3}, {4, 0, 2}),
                    arr<float>(ElemType::F32, {5}, std::vector<float>(5, 0)),
                    arr<int32_t>(ElemType::S32, {4, 1}, {0, 3, 2, 4}),
                    arr<float>(ElemType::F32, {4}, {1, 2, 3, 4})}, 3);
  CHECK(near(get<float>(o[0]), {8, 9, 0, 1, 4, 5}));
  CHECK(near(get<float>(o[1]), {1, 0, 3, 2, 4}));
  CHECK(near(get<float>(o[2]), {1, 0, 3, 2, 4}));
}

void test_scatter_add_duplicates() {
  Builder b("scatter_dup");
  Value zeros = b.parameter(TensorType{ElemType::F32, {5}});
  Value sidx = b.parameter(TensorType{ElemType::S32, {4, 1}});
  Value upd = b.parameter(F32_4);
  Builder::ScatterDims s;
  s.inserted_window_dims = {0};
  s.scatter_dims_to_operand_dims = {0};
  s.index_vector_dim = 1;
  const ReduceOp add = ReduceOp::Add;
  b.ret({b.scatter(zeros, sidx, upd, s, &add)});
  auto o = exec(b, {arr<float>(ElemType::F32, {5}, std::vector<float>(5, 0)),
                    arr<int32_t>(ElemType::S32, {4, 1}, {0, 2, 2, 4}),
                    arr<float>(ElemType::F32, {4}, {1, 2, 3, 4})}, 1);
  CHECK(near(get<float>(o[0]), {1, 0, 5, 0, 4}));
}

void test_convolution() {
  Builder b("conv");
  Value in = b.parameter(TensorType{ElemType::F32, {1, 1, 3, 3}});
  Value k = b.parameter(TensorType{ElemType::F32, {1, 1, 2, 2}});
  Value in_nhwc = b.parameter(TensorType{ElemType::F32, {1, 3, 3, 1}});
  Value k_hwio = b.parameter(TensorType{ElemType::F32, {2, 2, 1, 1}});
  Builder::ConvDims nchw;
  nchw.input_spatial = {2, 3};
  nchw.kernel_spatial = {2, 3};
  nchw.output_spatial = {2, 3};
  Value c1 = b.convolution(in, k, nchw, {1, 1}, {{0, 0}, {0, 0}}, {1, 1}, {1, 1}, 1, 1,
                           TensorType{ElemType::F32, {1, 1, 2, 2}});
  Value c2 = b.convolution(in, k, nchw, {2, 2}, {{1, 1}, {1, 1}}, {}, {}, 1, 1,
                           TensorType{ElemType::F32, {1, 1, 2, 2}});
  Builder::ConvDims nhwc;
  nhwc.input_batch = 0, nhwc.input_feature = 3, nhwc.input_spatial = {1, 2};
  nhwc.kernel_input_feature = 2, nhwc.kernel_output_feature = 3, nhwc.kernel_spatial = {0, 1};
  nhwc.output_batch = 0, nhwc.output_feature = 3, nhwc.output_spatial = {1, 2};
  Value c3 = b.convolution(in_nhwc, k_hwio, nhwc, {}, {}, {}, {}, 1, 1,
                           TensorType{ElemType::F32, {1, 2, 2, 1}});
  b.ret({c1, c2, c3});
  auto o = exec(b, {arr<float>(ElemType::F32, {1, 1, 3, 3}, range_f(9, 1)),
                    arr<float>(ElemType::F32, {1, 1, 2, 2}, {1, 1, 1, 1}),
                    arr<float>(ElemType::F32, {1, 3, 3, 1}, range_f(9, 1)),
                    arr<float>(ElemType::F32, {2, 2, 1, 1}, {1, 1, 1, 1})}, 3);
  CHECK(near(get<float>(o[0]), {12, 16, 24, 28}));
  CHECK(near(get<float>(o[1]), {1, 5, 11, 28}));
  CHECK(near(get<float>(o[2]), {12, 16, 24, 28}));
}

void test_sort() {
  Builder b("sort");
  Value keys = b.parameter(TensorType{ElemType::F32, {5}});
  Value idx = b.iota(TensorType{ElemType::S32, {5}}, 0);
  auto s = b.sort({keys, idx}, 0, true, [](Builder& r, const std::vector<Value>& a) {
    return std::vector<Value>{r.compare(a[0], a[1], Cmp::LT)};
  });
  b.ret({s[0], s[1]});
  auto o = exec(b, {arr<float>(ElemType::F32, {5}, {3, 1, 4, 1, 5})}, 2);
  CHECK(near(get<float>(o[0]), {1, 1, 3, 4, 5}));
  CHECK((get<int32_t>(o[1]) == std::vector<int32_t>{1, 3, 0, 2, 4}));
}

void test_while_loop() {
  // Sums 1..n with n a runtime parameter: the trip count is data, not structure.
  Builder b("while");
  Value n = b.parameter(TensorType{ElemType::S32, {}});
  Value v = b.parameter(TensorType{ElemType::F32, {3}});
  Value zero = b.constant_i(0, ElemType::S32);
  auto out = b.while_loop(
      {zero, n, v},
      [](Builder& r, const std::vector<Value>& a) {
        return std::vector<Value>{r.compare(a[0], a[1], Cmp::LT)};
      },
      [](Builder& r, const std::vector<Value>& a) {
        Value i = r.add(a[0], r.constant_i(1, ElemType::S32));
        Value step = r.broadcast_to(r.convert(i, ElemType::F32), {3});
        return std::vector<Value>{i, a[1], r.add(a[2], step)};
      });
  b.ret({out[0], out[2]});
  auto o = exec(b, {arr<int32_t>(ElemType::S32, {}, {4}), arr<float>(ElemType::F32, {3}, {0, 1, 2})},
                2);
  CHECK((get<int32_t>(o[0]) == std::vector<int32_t>{4}));
  CHECK(near(get<float>(o[1]), {10, 11, 12}));
}

void test_rng_and_clamp() {
  Builder b("rng");
  Value st = b.parameter(TensorType{ElemType::U64, {2}});
  auto [ns, bits] = b.rng_bit_generator(st, TensorType{ElemType::U32, {2, 3}});
  CHECK((bits.type == TensorType{ElemType::U32, {2, 3}}));
  CHECK(ns.type == st.type);
  Value x = b.parameter(TensorType{ElemType::F32, {3}});
  Value c = b.clamp(b.constant_f(0, ElemType::F32), x, b.constant_f(2, ElemType::F32));
  Value ct = b.clamp(b.splat_f(-5, x.type), x, b.splat_f(1, x.type));
  b.ret({ns, bits, c, ct});
  auto o = exec(b, {arr<uint64_t>(ElemType::U64, {2}, {42, 0}),
                    arr<float>(ElemType::F32, {3}, {-1, 0.5f, 3})}, 4);
  CHECK(o[0].size() == 16 && o[1].size() == 24);
  auto s = get<uint64_t>(o[0]);
  CHECK(!(s[0] == 42 && s[1] == 0));
  bool nonzero = false;
  for (uint32_t v : get<uint32_t>(o[1])) nonzero = nonzero || v != 0;
  CHECK(nonzero);
  CHECK(near(get<float>(o[2]), {0, 0.5f, 2}));
  CHECK(near(get<float>(o[3]), {-1, 0.5f, 1}));
}

// ---- structural tests (no plugin) ------------------------------------------------

std::string small_program(double k) {
  Builder b;
  Value x = b.parameter(F32_4);
  b.ret({b.add(x, b.broadcast_to(b.constant_f(k, ElemType::F32), {4}))});
  return b.fingerprint();
}

void test_fingerprint() {
  std::string f1 = small_program(1.0), f2 = small_program(1.0), f3 = small_program(2.0);
  CHECK(f1.size() == 32);
  CHECK(f1.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(f1 == f2);
  CHECK(f1 != f3);
  CHECK(hash128("") == hash128(""));
  CHECK(hash128("") != hash128(std::string(1, '\0')));
  CHECK(hash128("abcdefgh") != hash128("abcdefgi"));
  CHECK(hash128("abcdefgh12345678") != hash128("12345678abcdefgh"));
  // Pinned: the hash names on-disk cache entries, so it must not drift.
  CHECK(hash128("torch_tpu") == "25d207ce81d086ad7157eb8d7913bcfb");
}

void test_type_errors() {
  Builder b;
  Value f = b.parameter(F32_4);
  Value i = b.parameter(TensorType{ElemType::S32, {4}});
  Value f3 = b.parameter(TensorType{ElemType::F32, {3}});
  Value m = b.parameter(TensorType{ElemType::F32, {2, 3}});
  CHECK_THROWS(b.add(f, i), "stablehlo.add:");
  CHECK_THROWS(b.mul(f, f3), "stablehlo.multiply:");
  CHECK_THROWS(b.binary("and", f, f), "stablehlo.and:");
  CHECK_THROWS(b.unary("sqrt", i), "stablehlo.sqrt:");
  CHECK_THROWS(b.compare(f, i, Cmp::LT), "stablehlo.compare:");
  CHECK_THROWS(b.select(f, f, f), "stablehlo.select:");
  CHECK_THROWS(b.reshape(m, {4}), "stablehlo.reshape:");
  CHECK_THROWS(b.transpose(m, {0, 0}), "stablehlo.transpose:");
  CHECK_THROWS(b.broadcast_to(m, {4, 3}), "stablehlo.broadcast_in_dim:");
  CHECK_THROWS(b.broadcast_in_dim(f3, {2, 4}, {1}), "stablehlo.broadcast_in_dim:");
  CHECK_THROWS(b.slice(m, {0, 0}, {3, 3}, {1, 1}), "stablehlo.slice:");
  CHECK_THROWS(b.concatenate({m, f3}, 0), "stablehlo.concatenate:");
  b.dot_general(m, m, {}, {}, {1}, {1}, ElemType::F32);  // [2,3]x[2,3] contracting 1/1 is fine
  CHECK_THROWS(b.dot_general(m, m, {}, {}, {1}, {0}, ElemType::F32), "stablehlo.dot_general:");
  CHECK_THROWS(b.reduce(m, b.constant_i(0, ElemType::S32), {1}, ReduceOp::Add), "stablehlo.reduce:");
  CHECK_THROWS(b.reduce(m, b.constant_f(0, ElemType::F32), {1}, ReduceOp::And), "stablehlo.reduce:");
  CHECK_THROWS(b.pad(f, b.constant_i(0, ElemType::S32), {0}, {0}, {0}), "stablehlo.pad:");
  CHECK_THROWS(b.dynamic_slice(f, {b.constant_f(0, ElemType::F32)}, {2}), "stablehlo.dynamic_slice:");
  CHECK_THROWS(b.clamp(f3, f, f3), "stablehlo.clamp:");
  CHECK_THROWS(b.bitcast_convert(f, TensorType{ElemType::S16, {4}}), "stablehlo.bitcast_convert:");
  CHECK_THROWS(b.iota(TensorType{ElemType::S32, {3}}, 1), "stablehlo.iota:");
  CHECK_THROWS(b.rng_bit_generator(f, TensorType{ElemType::U32, {4}}), "stablehlo.rng_bit_generator:");
  CHECK_THROWS(b.compare(b.constant_f(1, ElemType::C64), b.constant_f(1, ElemType::C64), Cmp::LT),
               "stablehlo.compare:");
  CHECK_THROWS(b.constant_f(2.5, ElemType::S32), "stablehlo.constant:");
  CHECK_THROWS(b.dense_i({1, 2}, TensorType{ElemType::S32, {3}}), "stablehlo.constant:");
  Builder::GatherDims g;
  g.offset_dims = {1};
  g.collapsed_slice_dims = {0};
  g.start_index_map = {0};
  g.index_vector_dim = 1;
  CHECK_THROWS(b.gather(m, i, g, {1, 3}, TensorType{ElemType::F32, {4, 2}}), "stablehlo.gather:");
  b.gather(m, i, g, {1, 3}, TensorType{ElemType::F32, {4, 3}});
  Builder::ConvDims cd;
  cd.input_spatial = cd.kernel_spatial = cd.output_spatial = {2};
  Value cin = b.parameter(TensorType{ElemType::F32, {1, 2, 5}});
  Value ck = b.parameter(TensorType{ElemType::F32, {3, 2, 2}});
  CHECK_THROWS(b.convolution(cin, ck, cd, {}, {}, {}, {}, 1, 1, TensorType{ElemType::F32, {1, 3, 5}}),
               "stablehlo.convolution:");
  b.convolution(cin, ck, cd, {}, {}, {}, {}, 1, 1, TensorType{ElemType::F32, {1, 3, 4}});
  CHECK_THROWS(b.convolution(cin, ck, cd, {}, {}, {}, {}, 2, 1, TensorType{ElemType::F32, {1, 3, 4}}),
               "stablehlo.convolution:");
  CHECK_THROWS(b.select_and_scatter(m, m, b.constant_f(0, ElemType::F32), {2, 2}, {1, 1}, {},
                                    Cmp::GE, ReduceOp::Add),
               "stablehlo.select_and_scatter:");
  CHECK_THROWS(b.sort({f}, 0, false, [](Builder& r, const std::vector<Value>& a) {
                 return std::vector<Value>{r.add(a[0], a[1])};  // not a predicate
               }),
               "stablehlo.sort:");
  // A region value may not escape its region.
  Value leaked;
  b.reduce({f}, {b.constant_f(0, ElemType::F32)}, {0},
           [&](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
             leaked = r.add(a[0], a[1]);
             return {leaked};
           });
  CHECK_THROWS(b.neg(leaked), "stablehlo.negate:");
  // A body that throws leaves the builder usable.
  CHECK_THROWS(b.reduce({f}, {b.constant_f(0, ElemType::F32)}, {0},
                        [](Builder& r, const std::vector<Value>& a) -> std::vector<Value> {
                          return {r.add(a[0], r.constant_i(1, ElemType::S32))};
                        }),
               "stablehlo.add:");
  Value ok = b.neg(f);
  CHECK(ok.valid());
  try {
    (void)b.module_text();
    CHECK(!"module_text before ret should throw");
  } catch (const std::logic_error&) {
  }
  CHECK((broadcast_shapes({2, 1}, {1, 3}) == std::vector<int64_t>{2, 3}));
  CHECK((broadcast_shapes({}, {4}) == std::vector<int64_t>{4}));
  CHECK((broadcast_shapes({5, 1, 3}, {4, 1}) == std::vector<int64_t>{5, 4, 3}));
  CHECK_THROWS(broadcast_shapes({2, 3}, {4, 3}), "broadcast_shapes:");
}

}  // namespace

// A misspelled elementwise op name is rejected while the program is built, not
// passed to the compiler; every name the builder documents is accepted.
void test_unknown_op_names() {
  Builder b;
  Value f = b.parameter(F32_4);
  Value i = b.parameter(TensorType{ElemType::S32, {4}});
  CHECK_THROWS(b.unary("expontial", f), "stablehlo.expontial: is not a StableHLO unary");
  CHECK_THROWS(b.unary("sqroot", f), "stablehlo.sqroot:");
  CHECK_THROWS(b.binary("mul", f, f), "stablehlo.mul: is not a StableHLO binary");
  CHECK_THROWS(b.binary("max", f, f), "stablehlo.max:");
  for (const char* op : {"exponential", "log", "sqrt", "rsqrt", "tanh", "logistic", "cosine",
                         "sine", "tan", "log_plus_one", "exponential_minus_one", "cbrt", "floor",
                         "ceil", "round_nearest_even", "round_nearest_afz", "is_finite", "negate",
                         "abs", "sign", "real", "imag"})
    b.unary(op, f);
  for (const char* op : {"not", "popcnt", "count_leading_zeros"}) b.unary(op, i);
  for (const char* op : {"add", "subtract", "multiply", "divide", "remainder", "maximum",
                         "minimum", "power", "atan2", "complex"})
    b.binary(op, f, f);
  for (const char* op : {"and", "or", "xor", "shift_left", "shift_right_arithmetic",
                         "shift_right_logical"})
    b.binary(op, i, i);
}

int main(int argc, char** argv) {
  const char* plugin = argc > 1 ? argv[1] : std::getenv("PJRT_PLUGIN_PATH");
  hlo_test::Runner runner;
  if (plugin) {
    std::string err = runner.open(plugin);
    if (!err.empty()) {
      std::fprintf(stderr, "cannot open plugin %s: %s\n", plugin, err.c_str());
      return 2;
    }
    g_runner = &runner;
  } else {
    std::printf("no plugin given (argv[1] or PJRT_PLUGIN_PATH): runtime tests skipped\n");
  }
  struct Test {
    const char* name;
    void (*fn)();
    bool runtime;
  };
  const Test tests[] = {
      {"elementwise", test_elementwise, true},
      {"unary_and_bits", test_unary_and_bits, true},
      {"constants", test_constants, true},
      {"empty_and_signature", test_empty_and_signature, true},
      {"generic_and_bf16", test_generic_and_bf16, true},
      {"donation", test_donation, true},
      {"call_module", test_call_module, true},
      {"shape", test_shape, true},
      {"slicing", test_slicing, true},
      {"dot", test_dot, true},
      {"reduce", test_reduce, true},
      {"reduce_long_dims", test_reduce_long_dims, true},
      {"windows", test_windows, true},
      {"gather_scatter", test_gather_scatter, true},
      {"scatter_add_duplicates", test_scatter_add_duplicates, true},
      {"convolution", test_convolution, true},
      {"sort", test_sort, true},
      {"while_loop", test_while_loop, true},
      {"rng_and_clamp", test_rng_and_clamp, true},
      {"fingerprint", test_fingerprint, false},
      {"float8_constants", test_float8_constants, false},
      {"type_errors", test_type_errors, false},
      {"unknown_op_names", test_unknown_op_names, false},
  };
  for (const auto& t : tests) {
    if (t.runtime && !g_runner) continue;
    cpp_check::section(t.name, t.fn);
  }
  return cpp_check::report();
}

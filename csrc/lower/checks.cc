#include "lower/checks.h"

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "core/settings.h"
#include "lower/registry.h"

namespace tpu::lower {

namespace {
std::atomic<bool> g_enabled{settings::flag("TORCH_TPU_CHECKS")};
}  // namespace

bool checks_enabled() { return g_enabled.load(std::memory_order_relaxed); }
void set_checks_enabled(bool on) { g_enabled = on; }

void Ctx::check(hlo::Value bad, hlo::Value value, CheckSpec spec) {
  if (!checks_enabled() || bad.type.numel() == 0) return;
  std::vector<int64_t> all;
  for (int64_t d = 0; d < bad.rank(); ++d) all.push_back(d);
  hlo::Value v = b.convert(value, hlo::ElemType::S64);
  if (v.dims() != bad.dims()) v = b.broadcast_to(v, bad.dims());
  // One max-reduce per check (one small fusion for XLA; a separate or-reduce of
  // `bad` doubled the check's kernels): the largest offending value, INT64_MIN
  // where nothing fails, so the flag is "worst != INT64_MIN". An offending
  // INT64_MIN itself is reported as INT64_MIN + 1 so that it still counts.
  hlo::Value lowest = b.splat_i(INT64_MIN, v.type);
  hlo::Value worst = b.select(bad, b.binary("maximum", v, b.splat_i(INT64_MIN + 1, v.type)), lowest);
  if (!all.empty())
    worst = b.reduce(worst, b.constant_i(INT64_MIN, hlo::ElemType::S64), all, hlo::ReduceOp::Max);
  bad = b.compare(worst, b.constant_i(INT64_MIN, hlo::ElemType::S64), hlo::Cmp::NE);
  checks_.push_back(Check{bad, worst, std::move(spec)});
}

void Ctx::check_index(hlo::Value index, int64_t size, bool allow_negative, CheckSpec spec) {
  if (!checks_enabled() || index.type.numel() == 0) return;
  hlo::Value i = b.convert(index, hlo::ElemType::S64);
  hlo::Value hi = b.compare(i, b.splat_i(size, i.type), hlo::Cmp::GE);
  hlo::Value lo = b.compare(i, b.splat_i(allow_negative ? -size : 0, i.type), hlo::Cmp::LT);
  check(b.binary("or", hi, lo), i, std::move(spec));
}

void Ctx::check_divisor(hlo::Value y) {
  if (hlo::is_float(y.elem()) || hlo::is_complex(y.elem()) || y.elem() == hlo::ElemType::PRED) return;
  hlo::Value zero = b.splat_i(0, y.type);
  check(b.compare(y, zero, hlo::Cmp::EQ), zero, CheckSpec{CheckSpec::kRuntimeError, "ZeroDivisionError"});
}

}  // namespace tpu::lower

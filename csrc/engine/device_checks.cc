#include "engine/device_checks.h"

#include "engine/async_errors.h"
#include "engine/metrics.h"

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tpu::engine {

namespace {

struct Registry {
  std::mutex mu;
  std::vector<PendingChecks> pending;
};
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// The first failed check of `p`, as a CheckFailure; false when all passed.
bool first_failure(const PendingChecks& p, CheckFailure* out) {
  const size_t n = p.specs.size();
  std::vector<int64_t> vals(n);
  try {
    p.flags->to_host(vals.data(), vals.size() * sizeof(int64_t));
    metrics().bytes_to_host += vals.size() * sizeof(int64_t);
  } catch (const pjrt::Error&) {
    // The program itself failed at run time: that failure is what to report
    // (async_errors.h); its checks say nothing.
    raise_async_failures(p.device);
    return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (vals[i] == INT64_MIN) continue;  // passed (lower::Ctx::check)
    std::string msg = p.specs[i]->message;
    auto at = msg.find("{}");
    if (at != std::string::npos) msg.replace(at, 2, std::to_string(vals[i]));
    std::string where = p.where ? p.where(i) : "";
    if (!where.empty()) msg += "\n(device-side check of " + where + ")";
    *out = CheckFailure(p.specs[i]->kind, msg);
    return true;
  }
  return false;
}

}  // namespace

void add_pending_checks(PendingChecks p) {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  // A loop that never reads a result must not grow this without bound: past a
  // bound, finished programs whose checks all passed are dropped (a failed one
  // stays until the next sync point reports it).
  if (r.pending.size() >= 1024) {
    std::vector<PendingChecks> keep;
    CheckFailure f(CheckSpec::kIndexError, "");
    for (auto& q : r.pending) {
      bool ready = q.flags->ready_event()->is_ready();
      if (!ready || first_failure(q, &f)) keep.push_back(std::move(q));
    }
    r.pending.swap(keep);
  }
  r.pending.push_back(std::move(p));
}

void raise_failed_checks(int device) {
  // A program that failed outright reports before the checks of any other.
  raise_async_failures(device);
  std::vector<PendingChecks> mine;
  {
    auto& r = registry();
    std::lock_guard<std::mutex> g(r.mu);
    if (r.pending.empty()) return;
    std::vector<PendingChecks> keep;
    for (auto& q : r.pending)
      (device < 0 || q.device == device ? mine : keep).push_back(std::move(q));
    r.pending.swap(keep);
  }
  CheckFailure f(CheckSpec::kIndexError, "");
  for (auto& q : mine)
    if (first_failure(q, &f)) throw f;
}

void clear_pending_checks() {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.pending.clear();
}

}  // namespace tpu::engine

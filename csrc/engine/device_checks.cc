#include "engine/device_checks.h"

#include "engine/async_errors.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "pjrt/host_transfer.h"

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

// The flags of each program in `ps`, read together: every copy is started
// before any is awaited, so a sync point after many checked programs (Strict
// Eager launches one per checked op) waits once rather than once per program.
// A program whose flags cannot be read (it failed at run time) gets no
// values. Every started copy is awaited before this returns, so no copy can
// land in freed memory.
std::vector<std::vector<int64_t>> read_flags(const std::vector<PendingChecks>& ps) {
  std::vector<std::vector<int64_t>> vals(ps.size());
  std::vector<std::unique_ptr<pjrt::Event>> copies(ps.size());
  pjrt::Client& client = Runtime::get().client();
  for (size_t k = 0; k < ps.size(); ++k) {
    vals[k].resize(ps[k].specs.size());
    if (vals[k].empty()) continue;
    try {
      copies[k] = pjrt::start_copy_to_host(client, *ps[k].flags, vals[k].data(),
                                           vals[k].size() * sizeof(int64_t));
    } catch (const pjrt::Error&) {
      vals[k].clear();
    }
  }
  for (size_t k = 0; k < ps.size(); ++k) {
    if (!copies[k]) continue;
    try {
      copies[k]->await();
      metrics().bytes_to_host += vals[k].size() * sizeof(int64_t);
    } catch (const pjrt::Error&) {
      vals[k].clear();
    }
  }
  return vals;
}

// The first failed check of `p` given its flags `vals`, as a CheckFailure;
// false when all passed.
bool first_failure(const PendingChecks& p, const std::vector<int64_t>& vals, CheckFailure* out) {
  if (vals.size() != p.specs.size()) {
    // The program itself failed at run time: that failure is what to report
    // (async_errors.h); its checks say nothing.
    raise_async_failures(p.device);
    return false;
  }
  for (size_t i = 0; i < vals.size(); ++i) {
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
    std::vector<PendingChecks> keep, done;
    for (auto& q : r.pending)
      (q.flags->ready_event()->is_ready() ? done : keep).push_back(std::move(q));
    std::vector<std::vector<int64_t>> vals = read_flags(done);
    CheckFailure f(CheckSpec::kIndexError, "");
    for (size_t k = 0; k < done.size(); ++k)
      if (vals[k].size() != done[k].specs.size() || first_failure(done[k], vals[k], &f))
        keep.push_back(std::move(done[k]));
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
  std::vector<std::vector<int64_t>> vals = read_flags(mine);
  CheckFailure f(CheckSpec::kIndexError, "");
  for (size_t k = 0; k < mine.size(); ++k)
    if (first_failure(mine[k], vals[k], &f)) throw f;
}

void clear_pending_checks() {
  auto& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  r.pending.clear();
}

}  // namespace tpu::engine

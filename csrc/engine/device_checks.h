// Device-side checks (bounds of runtime indices, integer division by zero).
//
// XLA clamps out-of-range indices instead of failing, so a lowering that
// indexes with runtime data also computes, inside the same program, a flag and
// the offending value for each check it declares (lower::Ctx::check). A
// program's checks leave it as one extra s64[n] output: per check the offending
// value, INT64_MIN when it passed. Launching registers that buffer here
// without waiting; the host looks
// at the flags only where it waits anyway (a read to the host, synchronize, an
// event), like CUDA's device-side asserts, and raises the first failure.
//
// Torch-free: the aten layer turns a CheckFailure into IndexError/RuntimeError.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "lower/checks.h"
#include "pjrt/pjrt.h"

namespace tpu::engine {

using lower::CheckSpec;

class CheckFailure : public std::runtime_error {
 public:
  CheckFailure(CheckSpec::Kind kind, const std::string& what)
      : std::runtime_error(what), kind_(kind) {}
  CheckSpec::Kind kind() const { return kind_; }

 private:
  CheckSpec::Kind kind_;
};

// The checks of one launched program.
struct PendingChecks {
  std::shared_ptr<pjrt::Buffer> flags;  // s64[specs.size()]
  std::vector<const CheckSpec*> specs;  // owned by the program's cache entry
  std::shared_ptr<const void> keep;     // keeps the specs' owner alive
  // Says which op (and, in Defer & Fuse, which Python line) declared check i.
  std::function<std::string(size_t)> where;
  int device = 0;
};

// Registers a launched program's checks (never waits).
void add_pending_checks(PendingChecks p);

// Waits for the flags of every registered check (of `device`, -1: all) and
// throws CheckFailure for the first that failed; the rest are dropped, so one
// bad index raises once. The host waits here anyway: the caller is about to
// read a result or synchronise. Asynchronous run-time failures of launched
// programs (async_errors.h) are raised first.
void raise_failed_checks(int device = -1);

// Drops every registered check (after a reported failure elsewhere).
void clear_pending_checks();

}  // namespace tpu::engine

// The one generic boxed kernel, registered for every lowered op.
//
// Strict Eager: the call's key (op, input view layouts and dtypes, structural
// arguments; runtime scalars by kind only) finds its single-op program, compiled
// on first use; the program launches asynchronously and its outputs become new
// storages (functional results) or replace the buffers of written storages
// (in-place and out=). Defer & Fuse records the same call into the pending
// graph instead (deferred_graph.cc). Both go through the same Entry and emit().
#include "aten/op_kernel.h"

#include "core/settings.h"

#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <mutex>
#include <unordered_map>

#include "aten/deferred_graph.h"
#include "aten/host_tier.h"
#include "aten/kernels.h"
#include "aten/op_call.h"
#include "aten/recording_time.h"
#include "aten/tpu_tensor.h"
#include "engine/compile_pool.h"
#include "engine/device_checks.h"
#include "engine/execution_mode.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/transfer.h"

namespace tpu::aten {

using hlo::ElemType;

[[noreturn]] void throw_check_failure(const engine::CheckFailure& f);

namespace {

// Buffers for the call's inputs: storages' buffers (running pending work
// first), then host values and RNG states uploaded. Small vectors: a cached op
// of a few inputs allocates no list for them.
using InputBuffers = c10::SmallVector<std::shared_ptr<pjrt::Buffer>, 8>;
void input_buffers(Call& c, InputBuffers& bufs, c10::SmallVector<pjrt::Buffer*, 8>& raw) {
  bufs.reserve(c.inputs.size());
  raw.reserve(c.inputs.size());
  for (auto& in : c.inputs) {
    bufs.push_back(in.kind == Input::kSlot ? in.slot->buffer() : host_input_buffer(in, c.device));
    raw.push_back(bufs.back().get());
  }
}

}  // namespace

void add_entry_checks(const std::shared_ptr<Entry>& e, std::shared_ptr<pjrt::Buffer> flags,
                      int device, std::string where) {
  engine::PendingChecks p;
  p.flags = std::move(flags);
  for (const auto& s : e->checks) p.specs.push_back(&s);
  p.keep = e;
  p.where = [where = std::move(where)](size_t) { return where; };
  p.device = device;
  engine::add_pending_checks(std::move(p));
}

namespace {

// Pipelined compilation (engine/compile_pool.h): TORCH_TPU_PIPELINED_COMPILE=1|0
// or torch_tpu.debug.pipelined_compile(...); by default on wherever the process
// has a second CPU to compile on. On 2 CPUs (benchmarks/cold_start.py, interleaved):
// quiet, the GPT's cold training step 2.20 vs 2.53 s; loaded, the same wall and CPU
// time either way. Never with TORCH_TPU_COMPILE_THREADS=0 or launch blocking (an
// error must point at its op).
std::atomic<bool> g_pipelining{[] {
  if (tpu::settings::raw("TORCH_TPU_PIPELINED_COMPILE"))
    return tpu::settings::flag("TORCH_TPU_PIPELINED_COMPILE");
  return engine::cpus_allowed() >= 2;
}()};

bool may_pipeline() {
  return g_pipelining.load(std::memory_order_relaxed) && !engine::launch_blocking() &&
         engine::compile_threads() > 0;
}

// Starts compiling `e`'s single-op program on the pool. The Entry's lock makes
// a launch that needs it first wait for it (or compile it itself, if no worker
// has started yet): the same program either way. A failure is left for that
// launch to raise (it compiles again and reports as Strict Eager always has).
void compile_soon(const std::shared_ptr<Entry>& e, const std::string& what) {
  if (e->has_executable()) return;
  // The caller's thread-local state (the profiler's among it) goes with the job,
  // so a profile of the call shows its compile, as it does compiling at the call.
  engine::run_in_background([e, what, state = at::ThreadLocalState()] {
    at::ThreadLocalStateGuard guard(state);
    try {
      e->executable(what);
    } catch (...) {
    }
  });
}

// A Strict Eager call while this thread's trace holds pipelined ops: recorded
// behind them (running it now would wait for their programs). Its results are
// pending until the next sync point, like Defer & Fuse's, and each op still runs
// as its own single-op program, in order.
void record_pipelined(Call& c) {
  c.deferred = true;
  prepare(c);
  if (entry_cache().find(c.key)) engine::metrics().cache_hits++;
  else engine::metrics().cache_misses++;
  std::shared_ptr<Entry> e = entry_for(c);
  compile_soon(e, c.info.name);
  const bool checked = !e->checks.empty();
  record_deferred(c, std::move(e), /*pipelined=*/true);
  // An op with device-side checks ends the pipeline: its checks are then
  // registered at its call, as Strict Eager registers them, and a failure is
  // reported at the same sync point.
  if (checked) flush_pending("device-side check");
}

void run_strict(Call& c) {
  c.want_descs = false;  // a hit needs the key and the inputs only
  prepare(c);
  std::shared_ptr<Entry> e = entry_cache().find(c.key);
  if (e) {
    engine::metrics().cache_hits++;
    // Known from Defer & Fuse recording (a torch.compile graph's op) but never
    // compiled alone: as good as a miss for the host tier.
    if (!e->has_executable() && run_on_host_tier(c)) return;
  } else {
    engine::metrics().cache_misses++;
    if (run_on_host_tier(c)) return;
    c.want_descs = true;  // emitting the op reads the argument descriptors
    // A program to compile: with nothing pending on this thread, compile it in
    // the background and record the op, starting a pipelined trace that the
    // following ops join until the next sync point (record_pipelined).
    bool pipeline = may_pipeline() && pending_nodes() == 0;
    if (pipeline) c.deferred = true;  // its inputs are materialised: the same key
    c.walk();
    e = entry_for(c);
    if (pipeline && !e->checks.empty()) {
      // An op with device-side checks compiles at its call (see record_pipelined).
      pipeline = false;
      c.deferred = false;
      c.walk();
    }
    if (pipeline) {
      compile_soon(e, c.info.name);
      record_deferred(c, std::move(e), /*pipelined=*/true);
      return;
    }
  }
  const pjrt::Executable& exe = e->executable(c.info.name);
  engine::metrics().ops_executed++;
  draw_rng(c, *e);
  InputBuffers bufs;
  c10::SmallVector<pjrt::Buffer*, 8> raw;
  input_buffers(c, bufs, raw);
  // A written input is donated (updated in place) when its storage's slot and this
  // call hold the only references to its buffer: no clone shares it, no transfer
  // or other argument of this call reads it.
  std::vector<int64_t> donate;
  for (int64_t i : e->donatable)
    if (bufs[i].use_count() == 2) donate.push_back(i);
  engine::metrics().donated_inputs += donate.size();
  auto outs = engine::launch(exe, raw.data(), raw.size(), c.device, e->origin, donate);
  if (!e->checks.empty()) {
    add_entry_checks(e, outs.back(), c.device, c.info.name);
    if (engine::launch_blocking()) raise_device_check_failures(c.device);
  }

  c10::SmallVector<at::Tensor, 4> fresh;
  fresh.reserve(e->outs.size());
  size_t o = 0;  // program outputs skip kNone results
  for (const OutSpec& s : e->outs) {
    if (s.kind == OutSpec::kNone) {
      fresh.push_back(at::Tensor());
    } else if (s.kind == OutSpec::kNew) {
      at::Tensor t = empty_result(s.sizes, s.strides, s.dtype, c.device);
      slot_of(t)->set_buffer(outs[o++], lower::to_elem(s.dtype));
      fresh.push_back(std::move(t));
    } else {
      c.inputs[s.input].slot->set_buffer(outs[o++], s.elem);
    }
  }
  push_results(c, *e, fresh);
}

}  // namespace

const pjrt::Executable& Entry::executable(const std::string& what) {
  // Set once and never replaced, so after the first call no lock is needed; the
  // caller's reference to the Entry keeps the executable alive.
  if (const pjrt::Executable* ready = ready_.load(std::memory_order_acquire)) return *ready;
  std::lock_guard<std::mutex> g(exe_mu_);
  if (!exe_) {
    exe_ = engine::compile_program(mlir, what);
    ready_.store(exe_.get(), std::memory_order_release);
  }
  return *exe_;
}

std::shared_ptr<pjrt::Buffer> host_input_buffer(const Input& in, int device) {
  if (in.kind == Input::kRng) return engine::upload(in.bytes, ElemType::U64, {2}, device);
  return scalar_buffer(in.bytes, in.type.elem, device);
}

std::shared_ptr<pjrt::Buffer> scalar_buffer(const void* bytes, ElemType elem, int device) {
  // Small cache: a learning rate or an alpha repeats every step.
  struct K {
    char b[16];
    ElemType e;
    int d;
    bool operator==(const K& o) const {
      return e == o.e && d == o.d && std::memcmp(b, o.b, 16) == 0;
    }
  };
  struct H {
    size_t operator()(const K& k) const {
      uint64_t a, c;
      std::memcpy(&a, k.b, 8);
      std::memcpy(&c, k.b + 8, 8);
      return std::hash<uint64_t>()(a * 31 + c) ^ (static_cast<size_t>(k.e) << 4) ^ k.d;
    }
  };
  static std::mutex mu;
  static auto* cache = new std::unordered_map<K, std::shared_ptr<pjrt::Buffer>, H>();
  K k{};
  std::memcpy(k.b, bytes, std::min<size_t>(16, engine::elem_size(elem)));
  k.e = elem;
  k.d = device;
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache->find(k);
    if (it != cache->end()) return it->second;
  }
  auto buf = engine::upload(k.b, elem, {}, device);
  std::lock_guard<std::mutex> g(mu);
  if (cache->size() > 4096) cache->clear();
  (*cache)[k] = buf;
  return buf;
}

namespace {

// PyTorch's Conjugate and Negative fallbacks resolve lazy conj/neg bits before
// most ops but let a few through (clone, mm, bmm, addmm, dot, ...) for the
// kernel to honour. Lowerings read buffers, so read-only tensor inputs with a
// bit are resolved first. copy_ handles the bits itself (copy_kernels.cc).
void resolve_input_bits(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  if (op.schema().name() == "aten::copy_" || stack->size() < args.size()) return;
  const size_t base = stack->size() - args.size();
  auto resolved = [](const at::Tensor& t) {
    return t.defined() && (t.is_conj() || t.is_neg()) ? resolve_lazy_bits(t) : t;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].alias_info() && args[i].alias_info()->isWrite()) continue;
    c10::IValue& v = (*stack)[base + i];
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && (t.is_conj() || t.is_neg())) v = resolve_lazy_bits(t);
    } else if (v.isTensorList()) {
      auto list = v.toTensorList();
      for (size_t j = 0; j < list.size(); ++j) list.set(j, resolved(list.get(j)));
    }
  }
}

}  // namespace

void op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpInfo* info = op_info(op);
  TORCH_CHECK(info, "internal error: no lowering for ", full_name(op.schema().operator_name()));
  resolve_input_bits(op, stack);
  Call c(op, *info, stack);
  try {
    if (engine::current_mode() == engine::Mode::kDeferAndFuse) {
      auto t0 = std::chrono::steady_clock::now();
      c.deferred = true;
      prepare(c);
      // Not the host tier: in this mode its flushes would cut the fused step in
      // pieces; a trace whose shapes keep changing runs node by node at its
      // flush instead (trace_by_node.h).
      record_deferred(c, entry_for(c));
      // steady_clock is a vDSO read (tens of ns): cheap enough to keep always on.
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - t0).count();
      add_recording_time(info, static_cast<uint64_t>(ns));
    } else if (pipelining_on_this_thread() && may_pipeline()) {
      record_pipelined(c);
    } else {
      run_strict(c);
    }
  } catch (const engine::CheckFailure& f) {
    throw_check_failure(f);
  } catch (const pjrt::Error& e) {
    if (e.is_out_of_memory())
      TORCH_CHECK_WITH(OutOfMemoryError, false, "tpu out of memory in ", info->name, ": ", e.what());
    TORCH_CHECK(false, e.what());
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK(false, "internal error lowering ", info->name, " (arguments: ", describe(c),
                "): ", e.what());
  }
}

[[noreturn]] void throw_check_failure(const engine::CheckFailure& f) {
  if (f.kind() == engine::CheckSpec::kIndexError) TORCH_CHECK_INDEX(false, f.what());
  TORCH_CHECK(false, f.what());
}

void raise_device_check_failures(int device) {
  try {
    engine::raise_failed_checks(device);
  } catch (const engine::CheckFailure& f) {
    throw_check_failure(f);
  } catch (const pjrt::Error& e) {  // an asynchronous run-time failure
    if (e.is_out_of_memory()) TORCH_CHECK_WITH(OutOfMemoryError, false, e.what());
    TORCH_CHECK(false, e.what());
  }
}

std::vector<OpRecordingTime> recording_by_op(bool reset) {
  std::vector<OpRecordingTime> out;
  for_each_op_info([&](OpInfo& info) {
    uint64_t calls = reset ? info.recorded_calls.exchange(0) : info.recorded_calls.load();
    uint64_t ns = reset ? info.recorded_ns.exchange(0) : info.recorded_ns.load();
    if (calls) out.push_back({info.name, calls, ns});
  });
  return out;
}

void set_pipelined_compile(bool on) { g_pipelining = on; }
bool pipelined_compile() { return g_pipelining.load(); }

void clear_program_cache() {
  entry_cache(true).clear(), entry_cache(false).clear();
  clear_host_tier_signatures();
}
size_t program_cache_size() { return entry_cache().size(); }

}  // namespace tpu::aten

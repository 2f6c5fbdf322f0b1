#include "engine/executor.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "core/settings.h"
#include "engine/async_errors.h"
#include "engine/compile_progress.h"
#include "engine/disk_cache.h"
#include "engine/metrics.h"
#include "engine/program_dump.h"
#include "engine/runtime.h"
#include "hlo/builder.h"

namespace tpu::engine {

namespace {
std::atomic<bool> g_blocking{false};

// Completion events of launched programs and transfers, per device, for
// synchronize() and stream events, with who launched them (for the message of
// an asynchronous failure). Pruned of finished ones as it grows so that it
// stays small; a finished one that failed is noted (engine/async_errors.h).
constexpr size_t kPruneAt = 256;  // tracked launches before finished ones are dropped
struct Work {
  int device;
  std::shared_ptr<pjrt::Event> done;
  std::shared_ptr<const LaunchOrigin> origin;  // null: a transfer
};
struct InFlight {
  std::mutex mu;
  // Room up to the prune bound from the start (see track_event): the list is
  // compacted in place, so it never reallocates in a steady loop.
  std::vector<Work> events = [] {
    std::vector<Work> v;
    v.reserve(kPruneAt + 1);
    return v;
  }();
};
InFlight& in_flight() {
  static auto* f = new InFlight();
  return *f;
}

void note_if_failed(const Work& w) {
  std::string err = w.done->error_message();
  if (!err.empty()) note_async_failure(w.device, w.origin.get(), err, false);
}

// Drops the entries `take` takes (it gets each one to keep or note first),
// compacting the rest in place and in order, so that the list keeps its
// capacity: a fresh list regrown from empty after every prune was a
// reallocation every few launches.
template <typename Take>
void take_from(std::vector<Work>& events, Take take) {
  size_t kept = 0;
  for (auto& e : events) {
    if (take(e)) continue;
    if (&events[kept] != &e) events[kept] = std::move(e);
    ++kept;
  }
  events.erase(events.begin() + static_cast<std::ptrdiff_t>(kept), events.end());
}

void prune_locked(InFlight& f) {
  take_from(f.events, [](Work& e) {
    if (!e.done->is_ready()) return false;
    note_if_failed(e);
    return true;
  });
}
}  // namespace

void track_ready(int device, const pjrt::Buffer& out, std::shared_ptr<const LaunchOrigin> origin) {
  track_event(device, out.ready_event(), std::move(origin));
}

void track_event(int device, std::shared_ptr<pjrt::Event> ev,
                 std::shared_ptr<const LaunchOrigin> origin) {
  auto& f = in_flight();
  std::lock_guard<std::mutex> g(f.mu);
  if (f.events.size() >= kPruneAt) prune_locked(f);
  f.events.push_back(Work{device, std::move(ev), std::move(origin)});
}

void collect_failed_launches() {
  auto& f = in_flight();
  std::lock_guard<std::mutex> g(f.mu);
  prune_locked(f);
}

std::vector<std::shared_ptr<pjrt::Event>> unfinished_work(int device) {
  auto& f = in_flight();
  std::lock_guard<std::mutex> g(f.mu);
  prune_locked(f);
  std::vector<std::shared_ptr<pjrt::Event>> out;
  for (auto& e : f.events)
    if (device < 0 || e.device == device) out.push_back(e.done);
  return out;
}

void synchronize(int device) {
  std::vector<Work> waiting;
  {
    auto& f = in_flight();
    std::lock_guard<std::mutex> g(f.mu);
    take_from(f.events, [&](Work& e) {
      if (device >= 0 && e.device != device) return false;
      waiting.push_back(std::move(e));
      return true;
    });
  }
  // Every piece of work is waited for (none is left running behind a
  // failure), then the first failure is raised, naming its launcher.
  for (auto& w : waiting) {
    try {
      w.done->await();
    } catch (const pjrt::Error& e) {
      note_async_failure(w.device, w.origin.get(), e.what(), e.is_out_of_memory());
    }
  }
  raise_async_failures(device);
}

bool launch_blocking() { return g_blocking.load(std::memory_order_relaxed); }
void set_launch_blocking(bool on) { g_blocking = on; }

namespace {

std::mutex g_dump_mu;
std::string g_dump_dir;
// Once per process (re-armed by configure_disk_cache): a user needs to hear that
// the cache is broken, not once per program.
std::atomic<bool> g_warned_bad{false};
std::atomic<bool> g_warned_write{false};
std::atomic<bool> g_warned_unsafe{false};

uint64_t since_ns(std::chrono::steady_clock::time_point t0) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count());
}

void add_field(std::string& s, const std::string& f) {
  s += std::to_string(f.size());
  s += ':';
  s += f;
}

// Everything besides the program text that decides whether a serialised
// executable is valid here: the platform and its version, the plugin file
// itself (a rebuilt plugin with the same version string must not reuse
// entries), the devices, our entry format, and XLA_FLAGS as the plugin saw it
// (XLA reads it once per process; its compiler options change the code, so an
// entry compiled under other flags must not be served).
const std::string& platform_identity() {
  static std::mutex mu;
  static std::string id;
  std::lock_guard<std::mutex> g(mu);
  if (!id.empty()) return id;
  pjrt::Client& c = Runtime::get().client();
  std::string s;
  add_field(s, "format=" + std::to_string(DiskCache::kFormatVersion));
  add_field(s, c.platform_name());
  add_field(s, c.platform_version());
  const std::string& plugin = c.plugin()->path();
  add_field(s, plugin);
  struct stat st;
  if (::stat(plugin.c_str(), &st) == 0)
    add_field(s, std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
                     std::to_string(st.st_mtim.tv_nsec));
  add_field(s, std::to_string(c.plugin()->api_major()) + "." + std::to_string(c.plugin()->api_minor()));
  add_field(s, std::to_string(c.device_count()));
  for (const auto& d : c.devices()) add_field(s, d.kind);
  const char* xla_flags = std::getenv("XLA_FLAGS");
  add_field(s, xla_flags ? xla_flags : "");
  id = s;
  return id;
}

std::string program_key(const std::string& mlir, const pjrt::CompileOptions& options) {
  std::string s = platform_identity();
  add_field(s, options.serialize());
  add_field(s, mlir);
  return hlo::hash128(s);
}

// An executable from the persistent cache, or null (missing, off, or a bad
// entry, which the caller's store then replaces).
std::shared_ptr<pjrt::Executable> load_from_disk(const std::string& key,
                                                 const pjrt::CompileOptions& options) {
  auto& disk = DiskCache::get();
  auto r = disk.load(key);
  if (r.status == DiskCache::Load::kOff) return nullptr;
  if (r.status == DiskCache::Load::kHit) {
    auto t0 = std::chrono::steady_clock::now();
    try {
      auto exe = Runtime::get().client().deserialize(r.payload, options);
      metrics().disk_hits++;
      metrics().disk_bytes_read += r.payload.size();
      metrics().deserialize_ns += since_ns(t0);
      return exe;
    } catch (const pjrt::Error& e) {
      r.status = DiskCache::Load::kBad;
      r.problem = disk.entry_path(key) + ": " + e.what();
    }
  }
  metrics().disk_misses++;
  if (r.status == DiskCache::Load::kUnsafe) {
    metrics().disk_bad_entries++;
    if (!g_warned_unsafe.exchange(true))
      TORCH_WARN("torch_tpu: not loading compiled programs from the compile cache: ", r.problem,
                 ". Another user could plant a program there that this process would run; "
                 "such entries are never loaded (programs are compiled instead). Use a "
                 "directory only you can write (TORCH_TPU_CACHE_DIR, mode 700).");
    return nullptr;
  }
  if (r.status == DiskCache::Load::kBad) {
    metrics().disk_bad_entries++;
    if (!g_warned_bad.exchange(true))
      TORCH_WARN("torch_tpu: ignoring a bad compile-cache entry (", r.problem,
                 "); the program is recompiled and the entry replaced. Further bad entries "
                 "are counted in torch_tpu.cache.stats() without warning.");
  }
  return nullptr;
}

void store_to_disk(const std::string& key, const pjrt::Executable& exe) {
  auto& disk = DiskCache::get();
  if (!disk.enabled()) return;
  std::string bytes;
  try {
    bytes = exe.serialize();
  } catch (const pjrt::Error&) {
    return;  // a plugin that cannot serialise simply has no persistent cache
  }
  if (bytes.empty()) return;
  auto r = disk.store(key, bytes);
  if (r.ok) {
    metrics().disk_writes++;
    metrics().disk_bytes_written += r.bytes;
    metrics().disk_evictions += r.evicted;
  } else if (!r.skipped) {
    metrics().disk_write_failures++;
    if (!g_warned_write.exchange(true))
      TORCH_WARN("torch_tpu: cannot write the compile cache (", r.problem,
                 "); compiled programs are cached in memory for this process only. Set "
                 "TORCH_TPU_CACHE_DIR to a writable directory, or TORCH_TPU_CACHE=0.");
  }
}

}  // namespace

void configure_disk_cache(const std::string& dir, uint64_t max_bytes, bool enabled) {
  DiskCache::get().configure(dir, max_bytes, enabled);
  g_warned_bad = false;
  g_warned_write = false;
  g_warned_unsafe = false;
}

void set_dump_dir(const std::string& dir) {
  std::lock_guard<std::mutex> g(g_dump_mu);
  g_dump_dir = dir;
}

std::string dump_dir() {
  std::lock_guard<std::mutex> g(g_dump_mu);
  return g_dump_dir;
}

std::shared_ptr<pjrt::Executable> compile_program(const std::string& mlir, const std::string& what,
                                                  const pjrt::CompileOptions& options) {
  const std::string scope = "tpu::compile " + what;
  RECORD_USER_SCOPE(scope);
  // Fault injection, to test how compile failures are reported:
  // TORCH_TPU_DEBUG_FAIL_COMPILE=<text> fails every program whose MLIR has <text>.
  static const char* fail_if = settings::raw("TORCH_TPU_DEBUG_FAIL_COMPILE");
  if (fail_if != nullptr && mlir.find(fail_if) != std::string::npos)
    throw pjrt::Error(PJRT_Error_Code_INTERNAL, "compiling " + what +
                                                    " failed: injected by TORCH_TPU_DEBUG_FAIL_COMPILE");
  auto t0 = std::chrono::steady_clock::now();
  std::string key, dump = dump_dir();
  bool use_disk = DiskCache::get().enabled();
  if (use_disk || !dump.empty()) {
    try {
      key = program_key(mlir, options);
    } catch (const pjrt::Error& e) {
      throw pjrt::Error(e.code(), "compiling " + what + " failed: " + e.what());
    }
  }
  std::shared_ptr<pjrt::Executable> exe;
  if (use_disk) exe = load_from_disk(key, options);
  const bool from_disk = exe != nullptr;
  if (!exe) {
    auto tc = std::chrono::steady_clock::now();
    try {
      CompileWatch watch(what);
      exe = Runtime::get().client().compile(mlir, options);
    } catch (const pjrt::Error& e) {
      throw pjrt::Error(e.code(), "compiling " + what + " failed: " + e.what());
    }
    metrics().programs_compiled++;
    metrics().compile_ns += since_ns(tc);
    if (use_disk) store_to_disk(key, *exe);
  }
  // Donation is declared in the program text (hlo::Builder::parameter); a
  // program without it aliases no input, which spares every launch a list.
  exe->set_aliases_inputs(mlir.find("tf.aliasing_output") != std::string::npos);
  if (!dump.empty()) {
    ProgramRecord r;
    r.key = key;
    r.what = what;
    r.source = from_disk ? "disk" : "compile";
    r.seconds = since_ns(t0) / 1e9;
    r.num_outputs = exe->num_outputs();
    dump_program(dump, mlir, r);
  }
  return exe;
}

std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  const std::vector<pjrt::Buffer*>& args,
                                                  int device, const std::string& what,
                                                  std::function<std::string()> where) {
  return launch(exe, args, device,
                std::make_shared<const LaunchOrigin>(LaunchOrigin{what, std::move(where)}));
}

std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  const std::vector<pjrt::Buffer*>& args,
                                                  int device,
                                                  std::shared_ptr<const LaunchOrigin> origin) {
  return launch(exe, args.data(), args.size(), device, std::move(origin));
}

std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  pjrt::Buffer* const* args, size_t num_args,
                                                  int device,
                                                  std::shared_ptr<const LaunchOrigin> origin,
                                                  const std::vector<int64_t>& donate) {
  const std::string& what = origin->what;
  std::vector<std::shared_ptr<pjrt::Buffer>> out;
  // Declared before the guard so that it outlives the profiler's record of it;
  // built only under the profiler (a string per launch is measurable host time).
  std::string scope;
  // A RecordFunction is made only when some callback wants USER_SCOPE records
  // (as RECORD_FUNCTION does): constructing one per launch costs a few hundred
  // instructions, a tenth of our share of a cached op.
  std::optional<at::RecordFunction> guard;
  if (auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE))
    guard.emplace(std::move(*callbacks));
  const bool profiling = guard.has_value() && guard->isActive();
  if (profiling) {
    scope = "tpu::program " + what;
    guard->before(scope);
  }
  try {
    std::shared_ptr<pjrt::Event> done;
    out = exe.execute(args, num_args, device, donate, &done);
    if (fail_execute_matches(*origin)) {
      // Fault injection (async_errors.h): the program's outputs are lost, as
      // a device fault would lose them, and its completion event carries the
      // failure; nothing is raised here, at the launch.
      for (auto& b : out) {
        b->await_ready();
        b->delete_contents();
      }
      metrics().executions++;
      track_event(device, std::make_shared<pjrt::Event>(
                              "the program failed on the device: injected by "
                              "TORCH_TPU_DEBUG_FAIL_EXECUTE"),
                  std::move(origin));
      return out;
    }
    metrics().executions++;
    // Under the profiler the scope covers the device time too, as a user
    // reading the trace expects: wait here, as launch blocking does.
    // The launch's completion event stands for all of its outputs.
    const bool wait = launch_blocking() || profiling;
    if (wait) {
      if (done) done->await();
    } else if (done) {
      track_event(device, std::move(done), origin);
    }
  } catch (const pjrt::Error& e) {
    // An input that an earlier, failed program was to produce: that failure
    // is the one to report (as CUDA's next call reports a device fault).
    raise_async_failures(device);
    std::string msg = what + ": " + e.what();
    if (origin && origin->where) {
      std::string w = origin->where();
      if (!w.empty()) msg += "\n" + w;
    }
    throw pjrt::Error(e.code(), msg);
  }
  return out;
}

}  // namespace tpu::engine

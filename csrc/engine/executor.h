// Compiling and launching programs, shared by every execution mode.
// Torch-free: callers pass MLIR text and device buffers.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/async_errors.h"
#include "pjrt/pjrt.h"

namespace tpu::engine {

// Compiles `mlir` (counting compiles and their time in metrics). `what` names
// the op or graph for error messages. Throws pjrt::Error.
//
// Looks in the persistent cache first (engine/disk_cache.h, configured by
// set_disk_cache) and stores what it compiles there; a bad entry or a failed
// write warns once per process and falls back to compiling / memory only.
// With a dump directory set, writes <key>.mlir and <key>.json for each program.
std::shared_ptr<pjrt::Executable> compile_program(const std::string& mlir, const std::string& what,
                                                  const pjrt::CompileOptions& options = {});

// Points the persistent cache at `dir` (see engine/disk_cache.h) and re-arms
// its once-per-process warnings.
void configure_disk_cache(const std::string& dir, uint64_t max_bytes, bool enabled);

// Where compile_program dumps programs ("" : nowhere).
void set_dump_dir(const std::string& dir);
std::string dump_dir();

// Launches `exe` on `device`. With launch blocking (TORCH_TPU_LAUNCH_BLOCKING=1)
// waits for the outputs so that an error surfaces at the op that caused it.
// Under torch.profiler the launch is a "tpu::program <what>" scope that also
// waits for the outputs, so that the trace shows the program's device time.
// `where` (called only on failure) says which ops and Python lines the program
// came from; a failure after the launch returned is reported at the next sync
// point (engine/async_errors.h).
std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  const std::vector<pjrt::Buffer*>& args,
                                                  int device, const std::string& what,
                                                  std::function<std::string()> where = {});
// The same with the origin made once by the caller (a single-op program's,
// kept with it), sparing an allocation and a name copy per launch.
std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  const std::vector<pjrt::Buffer*>& args,
                                                  int device,
                                                  std::shared_ptr<const LaunchOrigin> origin);
// The same with the arguments as `num_args` pointers at `args` (Strict Eager's
// stack array of a few inputs: no list allocated per op).
// `donate`: inputs the program may consume (aliased in it; see pjrt::Executable::execute).
std::vector<std::shared_ptr<pjrt::Buffer>> launch(const pjrt::Executable& exe,
                                                  pjrt::Buffer* const* args, size_t num_args,
                                                  int device,
                                                  std::shared_ptr<const LaunchOrigin> origin,
                                                  const std::vector<int64_t>& donate = {});

// Waits for every program launched so far on `device` (-1: all devices);
// then raises the first asynchronous error (raise_async_failures).
void synchronize(int device);

// Notes that `out` is being produced on `device` by work launched just now
// (a program's first output, a transfer), for synchronize() and stream events.
// `origin`: who launched it (null: a transfer).
void track_ready(int device, const pjrt::Buffer& out,
                 std::shared_ptr<const LaunchOrigin> origin = nullptr);

// The same for a launch's completion event itself.
void track_event(int device, std::shared_ptr<pjrt::Event> done,
                 std::shared_ptr<const LaunchOrigin> origin);

// Notes every tracked launch that finished with an error (async_errors.h).
void collect_failed_launches();

// The completion events of the work launched on `device` (-1: all devices)
// that has not finished yet: what a stream event recorded now waits for.
std::vector<std::shared_ptr<pjrt::Event>> unfinished_work(int device);

bool launch_blocking();
void set_launch_blocking(bool on);

}  // namespace tpu::engine

// Streams and events of the tpu device (see stream_event.h for the model).
#include "aten/stream_event.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "aten/deferred_graph.h"
#include "aten/op_kernel.h"
#include "aten/tpu_tensor.h"
#include "engine/executor.h"
#include "engine/runtime.h"

namespace tpu::aten::streams {

namespace {

using EventList = std::vector<std::shared_ptr<pjrt::Event>>;

constexpr int kMaxDevices = 64;
// Stream ids: 0 is the default stream; a pool of kPoolSize ids per device
// serves getStreamFromGlobalPool (as CUDA's pool does); ids above it are
// streams made by torch.Stream() / torch.tpu.Stream().
constexpr c10::StreamId kPoolSize = 32;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void drop_ready(EventList& l) {
  l.erase(std::remove_if(l.begin(), l.end(), [](const auto& e) { return e->is_ready(); }), l.end());
}

// Which events each stream has been made to wait for (block / wait_event),
// pruned as they complete.
struct StreamTable {
  std::mutex mu;
  std::map<std::pair<int, c10::StreamId>, EventList> waits;
  std::atomic<c10::StreamId> next_id{kPoolSize + 1};
  std::atomic<uint32_t> pool_next[kMaxDevices] = {};
};
StreamTable& table() {
  static auto* t = new StreamTable();
  return *t;
}

EventList waits_of(const c10::Stream& s) {
  StreamTable& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  auto it = t.waits.find({s.device_index(), s.id()});
  if (it == t.waits.end()) return {};
  drop_ready(it->second);
  return it->second;
}

// The thread's current stream id per device (CUDA's current stream is per thread too).
thread_local c10::StreamId t_current[kMaxDevices] = {};

c10::DeviceIndex resolve(c10::DeviceIndex d) {
  if (d < 0) d = static_cast<c10::DeviceIndex>(current_device());
  TORCH_CHECK(d < kMaxDevices, "tpu device index ", int(d), " is out of range");
  return d;
}

c10::Stream make(c10::DeviceIndex d, c10::StreamId id) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kTpu, d), id);
}

// When a timed event's snapshot has completed: set by the last on-ready call.
struct Timing {
  std::mutex mu;
  std::condition_variable cv;
  int remaining = 0;
  int64_t done_ns = 0;

  void finish_one() {
    std::lock_guard<std::mutex> g(mu);
    done_ns = std::max(done_ns, now_ns());
    if (--remaining == 0) cv.notify_all();
  }
  int64_t wait_done() {
    std::unique_lock<std::mutex> g(mu);
    cv.wait(g, [this] { return remaining == 0; });
    return done_ns;
  }
};

struct TpuEvent {
  c10::DeviceIndex device = -1;
  bool timed = false;
  EventList snapshot;              // what the event completes after
  std::shared_ptr<Timing> timing;  // timed events only
};

// Everything recorded on `s` so far, as PJRT events: the device's unfinished
// work after the pending graph has run, and the stream's waits.
EventList snapshot_of(const c10::Stream& s) {
  flush_pending("stream event");
  EventList l = engine::unfinished_work(s.device_index());
  EventList w = waits_of(s);
  l.insert(l.end(), w.begin(), w.end());
  return l;
}

// Waits for all of `l`; a failed piece of work is reported (after all have
// finished) as the failure of the op that launched it (engine/async_errors.h).
void await_all(const EventList& l) {
  std::exception_ptr first;
  for (const auto& e : l) {
    try {
      e->await();
    } catch (const pjrt::Error&) {
      if (!first) first = std::current_exception();
    }
  }
  if (!first) return;
  raise_device_check_failures(-1);
  std::rethrow_exception(first);
}

bool all_ready(const EventList& l) {
  return std::all_of(l.begin(), l.end(), [](const auto& e) { return e->is_ready(); });
}

}  // namespace

c10::Stream current(c10::DeviceIndex device) {
  c10::DeviceIndex d = resolve(device);
  return make(d, t_current[d]);
}

c10::Stream default_stream(c10::DeviceIndex device) { return make(resolve(device), 0); }

c10::Stream fresh(c10::DeviceIndex device, int /*priority: one queue per device*/) {
  return make(resolve(device), table().next_id++);
}

c10::Stream from_pool(c10::DeviceIndex device, bool /*high_priority*/) {
  c10::DeviceIndex d = resolve(device);
  uint32_t k = table().pool_next[d]++;
  return make(d, 1 + static_cast<c10::StreamId>(k % kPoolSize));
}

c10::Stream exchange(c10::Stream s) {
  TORCH_CHECK(s.device_type() == kTpu, "expected a tpu stream, got a ", s.device_type(), " stream");
  c10::DeviceIndex d = resolve(s.device_index());
  c10::Stream old = make(d, t_current[d]);
  t_current[d] = s.id();
  return old;
}

bool query(const c10::Stream& s) {
  flush_pending("stream query");
  return all_ready(engine::unfinished_work(s.device_index())) && waits_of(s).empty();
}

void synchronize(const c10::Stream& s) { await_all(snapshot_of(s)); }

void synchronize_device(c10::DeviceIndex device) {
  flush_pending("synchronize");
  engine::synchronize(device);
}

void record(void** event, const c10::Stream& s, c10::DeviceIndex device, c10::EventFlag flag) {
  TORCH_CHECK(device < 0 || device == s.device_index(), "Event device index ", int(device),
              " does not match recording stream's device index ", int(s.device_index()), ".");
  auto* e = static_cast<TpuEvent*>(*event);
  if (e == nullptr) {
    e = new TpuEvent();
    e->timed = flag == c10::EventFlag::BACKEND_DEFAULT;
    *event = e;
  }
  e->device = s.device_index();
  e->snapshot = snapshot_of(s);
  if (!e->timed) return;
  // A fresh Timing per recording: callbacks of an earlier recording that are
  // still to come update the old one, which nobody reads any more.
  auto timing = std::make_shared<Timing>();
  timing->done_ns = now_ns();
  timing->remaining = static_cast<int>(e->snapshot.size()) + 1;
  e->timing = timing;
  for (const auto& ev : e->snapshot) ev->on_ready([timing] { timing->finish_one(); });
  timing->finish_one();  // the recording itself
}

void block(void* event, const c10::Stream& s) {
  auto* e = static_cast<TpuEvent*>(event);
  if (e == nullptr) return;
  EventList add = e->snapshot;
  drop_ready(add);
  if (add.empty()) return;
  StreamTable& t = table();
  std::lock_guard<std::mutex> g(t.mu);
  EventList& w = t.waits[{s.device_index(), s.id()}];
  drop_ready(w);
  w.insert(w.end(), add.begin(), add.end());
}

bool query_event(void* event) {
  auto* e = static_cast<TpuEvent*>(event);
  return e == nullptr || all_ready(e->snapshot);
}

void synchronize_event(void* event) {
  auto* e = static_cast<TpuEvent*>(event);
  if (e != nullptr) await_all(e->snapshot);
}

double elapsed_ms(void* start, void* end) {
  auto* a = static_cast<TpuEvent*>(start);
  auto* b = static_cast<TpuEvent*>(end);
  TORCH_CHECK(a != nullptr && b != nullptr && a->timing && b->timing,
              "Both events must be recorded with enable_timing=True before calculating elapsed time.");
  int64_t t0 = a->timing->wait_done(), t1 = b->timing->wait_done();
  return static_cast<double>(t1 - t0) / 1e6;
}

void destroy_event(void* event) noexcept { delete static_cast<TpuEvent*>(event); }

}  // namespace tpu::aten::streams

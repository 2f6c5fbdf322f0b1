// Which shape-free signatures have missed a cache with more than one key: the
// evidence the host tier (host_tier.h) and Defer & Fuse's node-by-node runs
// (trace_by_node.h) take that an op's or a trace's shapes keep changing, so
// that compiling its program for this key would be a compile used once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tpu::aten {

// Signature -> the first key noted under it, whether another has come since,
// and the time spent on each key by the path that runs it uncompiled (a key
// that keeps coming back -- a fixed shape after all -- buys its program once
// that time reaches a compile's). Bounded: past `bound` signatures (or keys
// of one signature) it starts over; a forgotten signature's next key counts
// as a first sighting again. Thread-safe.
class ShapeSightings {
 public:
  explicit ShapeSightings(size_t bound) : bound_(bound) {}

  struct Note {
    bool first = false;    // `sig` was not known
    bool changed = false;  // `sig` has had another key (or `vary` said so)
    uint64_t spent_ns = 0; // time charged to `key` under `sig` so far
  };

  // Notes `key` under `sig`; `vary` marks the signature as changing whatever
  // its keys (evidence from elsewhere).
  Note note(const std::string& sig, size_t key, bool vary = false) {
    std::lock_guard<std::mutex> g(mu_);
    Note n;
    auto it = sigs_.find(sig);
    if (it == sigs_.end()) {
      if (sigs_.size() >= bound_) sigs_.clear();
      it = sigs_.emplace(sig, Sighting{key, false, {}}).first;
      n.first = true;
    }
    Sighting& s = it->second;
    s.changed |= s.first_key != key || vary;
    n.changed = s.changed;
    if (n.changed) {
      if (s.spent.size() >= bound_) s.spent.clear();
      n.spent_ns = s.spent[key];
    }
    return n;
  }

  void charge(const std::string& sig, size_t key, uint64_t ns) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = sigs_.find(sig);
    if (it != sigs_.end()) it->second.spent[key] += ns;
  }

  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    sigs_.clear();
  }

 private:
  struct Sighting {
    size_t first_key = 0;
    bool changed = false;
    std::unordered_map<size_t, uint64_t> spent;
  };
  const size_t bound_;
  std::mutex mu_;
  std::unordered_map<std::string, Sighting> sigs_;
};

}  // namespace tpu::aten

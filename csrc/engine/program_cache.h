// In-memory cache of compiled programs, keyed by the bytes that determine a
// program's structure (op or graph, input layouts and dtypes, structural
// arguments, platform). Least-recently-used eviction past a bound.
// Torch-free: values are opaque to it.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace tpu::engine {

template <typename Entry>
class ProgramCache {
 public:
  explicit ProgramCache(size_t capacity = 4096) : capacity_(capacity) {}

  std::shared_ptr<Entry> find(const std::string& key) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second.second);
    return it->second.first;
  }

  void insert(const std::string& key, std::shared_ptr<Entry> e) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) {
      it->second.first = std::move(e);
      return;
    }
    lru_.push_front(key);
    map_.emplace(key, std::make_pair(std::move(e), lru_.begin()));
    while (map_.size() > capacity_) {
      map_.erase(lru_.back());
      lru_.pop_back();
    }
  }

  size_t size() {
    std::lock_guard<std::mutex> g(mu_);
    return map_.size();
  }

  void clear() {
    std::lock_guard<std::mutex> g(mu_);
    map_.clear();
    lru_.clear();
  }

 private:
  size_t capacity_;
  std::mutex mu_;
  std::list<std::string> lru_;
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<Entry>, std::list<std::string>::iterator>>
      map_;
};

}  // namespace tpu::engine

#include "dist/staging_pool.h"

#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <new>

#include <ATen/ATen.h>

#include "core/settings.h"

namespace tpu::dist {

namespace {

constexpr size_t kAlign = 64;  // at::empty's alignment; the CPU plugin zero-copies from 16

// Idle memory kept at most (TORCH_TPU_DIST_STAGING_POOL_MB, default 512): a
// block returned beyond it is freed, the oldest idle blocks first.
int64_t idle_limit() {
  static const int64_t limit = [] {
    int64_t mb = settings::integer("TORCH_TPU_DIST_STAGING_POOL_MB");
    return (mb < 0 ? 0 : mb) << 20;
  }();
  return limit;
}

class Pool {
 public:
  void* take(size_t nbytes) {
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = idle_.find(nbytes);
      if (it != idle_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        idle_bytes_ -= static_cast<int64_t>(nbytes);
        forget_oldest(p);
        ++stats_.reuses;
        return p;
      }
      ++stats_.fresh_allocs;
    }
    size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }

  void give_back(void* p, size_t nbytes) {
    std::lock_guard<std::mutex> g(mu_);
    if (static_cast<int64_t>(nbytes) > idle_limit()) {
      std::free(p);
      return;
    }
    idle_[nbytes].push_back(p);
    order_.emplace_back(p, nbytes);
    idle_bytes_ += static_cast<int64_t>(nbytes);
    while (idle_bytes_ > idle_limit() && !order_.empty()) {
      auto [old, size] = order_.front();
      order_.pop_front();
      auto& list = idle_[size];
      for (auto it = list.begin(); it != list.end(); ++it) {
        if (*it == old) {
          list.erase(it);
          break;
        }
      }
      idle_bytes_ -= static_cast<int64_t>(size);
      std::free(old);
    }
  }

  StagingPoolStats stats() {
    std::lock_guard<std::mutex> g(mu_);
    StagingPoolStats s = stats_;
    s.idle_bytes = idle_bytes_;
    return s;
  }

 private:
  void forget_oldest(void* p) {
    for (auto it = order_.begin(); it != order_.end(); ++it) {
      if (it->first == p) {
        order_.erase(it);
        return;
      }
    }
  }

  std::mutex mu_;
  std::map<size_t, std::vector<void*>> idle_;
  std::deque<std::pair<void*, size_t>> order_;  // idle blocks, oldest first
  int64_t idle_bytes_ = 0;
  StagingPoolStats stats_;
};

// Never destroyed: blocks may come back from device buffers freed at exit.
Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

}  // namespace

at::Tensor pooled_empty(c10::IntArrayRef sizes, c10::ScalarType dtype) {
  int64_t numel = c10::multiply_integers(sizes);
  size_t nbytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  void* p = pool().take(nbytes);
  return at::from_blob(
      p, sizes, [nbytes](void* data) { pool().give_back(data, nbytes); },
      at::TensorOptions().dtype(dtype).device(c10::kCPU));
}

StagingPoolStats staging_pool_stats() { return pool().stats(); }

}  // namespace tpu::dist

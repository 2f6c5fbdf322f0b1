#include "dist/phase_probe.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "core/settings.h"

namespace tpu::dist {

namespace {

struct Phase {
  int64_t count = 0;
  double total_us = 0;
  double fastest_us = 1e300;
};

class Table {
 public:
  void add(const char* phase, double us) {
    std::lock_guard<std::mutex> g(mu_);
    Phase& p = phases_[phase];
    ++p.count;
    p.total_us += us;
    if (us < p.fastest_us) p.fastest_us = us;
  }
  void print() {
    std::lock_guard<std::mutex> g(mu_);
    const char* rank = std::getenv("RANK");
    for (const auto& [name, p] : phases_)
      std::fprintf(stderr, "[tpu dist profile rank %s] %-28s n=%-6lld mean %9.1f us  fastest %9.1f us\n",
                   rank != nullptr ? rank : "?", name.c_str(), static_cast<long long>(p.count),
                   p.total_us / static_cast<double>(p.count), p.fastest_us);
  }

 private:
  std::mutex mu_;
  std::map<std::string, Phase> phases_;
};

// Never destroyed (a Gloo thread may still record during exit); printed by an
// atexit handler.
Table* g_table = nullptr;

Table& table() {
  static Table* t = [] {
    g_table = new Table();
    std::atexit([] { g_table->print(); });
    return g_table;
  }();
  return *t;
}

}  // namespace

bool profiling() {
  static const bool on = settings::flag("TORCH_TPU_DIST_PROFILE");
  return on;
}

void record_phase(const char* phase, std::chrono::steady_clock::time_point start) {
  auto us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start);
  table().add(phase, us.count());
}

}  // namespace tpu::dist

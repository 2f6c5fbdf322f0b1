#include "engine/metrics.h"

namespace tpu::engine {

Metrics& metrics() {
  static Metrics* m = new Metrics();  // leaked: used until process exit
  return *m;
}

std::map<std::string, uint64_t> Metrics::fallback_counts() {
  std::lock_guard<std::mutex> g(mu_);
  return fallback_;
}

bool Metrics::note_fallback(const std::string& op) {
  cpu_fallback_ops++;
  std::lock_guard<std::mutex> g(mu_);
  return fallback_[op]++ == 0;
}

void Metrics::note_fallback_site(const std::string& op, const std::string& site) {
  std::lock_guard<std::mutex> g(mu_);
  fallback_site_.emplace(op, site);
}

std::map<std::string, std::string> Metrics::fallback_sites() {
  std::lock_guard<std::mutex> g(mu_);
  return fallback_site_;
}

void Metrics::reset() {
  ops_executed = 0;
  programs_compiled = 0;
  compile_ns = 0;
  cache_hits = 0;
  cache_misses = 0;
  executions = 0;
  donated_inputs = 0;
  bytes_to_device = 0;
  bytes_to_host = 0;
  cpu_fallback_ops = 0;
  host_tier_ops = 0;
  disk_hits = 0;
  disk_misses = 0;
  disk_bad_entries = 0;
  disk_writes = 0;
  disk_write_failures = 0;
  disk_bytes_read = 0;
  disk_bytes_written = 0;
  disk_evictions = 0;
  deserialize_ns = 0;
  std::lock_guard<std::mutex> g(mu_);
  fallback_.clear();
  fallback_site_.clear();
}

}  // namespace tpu::engine

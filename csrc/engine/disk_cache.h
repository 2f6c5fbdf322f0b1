// Persistent cache of serialised executables, one file per program key, shared by
// every process of the machine that points at the same directory.
//
// Torch-free and policy-free: it reports what happened (hit, missing, a bad entry,
// a failed write) and the caller decides what to count and when to warn.
//
// Entry file "<key>.xpe": a fixed header (magic, format version, key, payload
// length, payload checksum) then the payload. Writers write a private temporary
// file in the same directory and rename() it over the entry, so readers see the
// old file or the new one, never a torn one; two processes storing one key both
// succeed (the last rename wins, and both wrote the same program). Readers trust
// nothing: any header field, length or checksum that does not match rejects it.
//
// Shared safely: the directory is created 0700 and entries 0600. An entry owned
// by another user, or any entry in a directory that others may write (or that
// another user owns), is never loaded (Load::kUnsafe; the caller warns once):
// a planted executable would run as this process.
//
// Size bound: least-recently-used by file mtime (a hit touches the file), evicted
// down to 90% of the bound once this process's running total passes the bound.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace tpu::engine {

class DiskCache {
 public:
  // Bumped whenever the entry layout or the meaning of a key changes.
  static constexpr uint32_t kFormatVersion = 1;

  static DiskCache& get();

  // `dir` "" or `enabled` false: every load misses and every store is skipped.
  void configure(const std::string& dir, uint64_t max_bytes, bool enabled);
  bool enabled() const;
  std::string dir() const;
  uint64_t max_bytes() const;

  enum class Load { kHit, kMissing, kBad, kUnsafe, kOff };
  struct LoadResult {
    Load status = Load::kOff;
    std::string payload;  // kHit
    std::string problem;  // kBad / kUnsafe: what was wrong, with the file's path
  };
  LoadResult load(const std::string& key);

  struct StoreResult {
    bool ok = false;
    bool skipped = false;      // off, or writing already failed in this process
    std::string problem;       // !ok && !skipped
    uint64_t bytes = 0;        // file size written
    uint64_t evicted = 0;      // files evicted to stay under the bound
  };
  // After a failed write (read-only or full disk) later stores are skipped:
  // retrying every compile would only slow the process down.
  StoreResult store(const std::string& key, const std::string& payload);

  // Removes every entry (and stale temporary file); returns files removed.
  uint64_t clear();
  // Entries and their total size on disk now (a directory scan).
  void usage(uint64_t* entries, uint64_t* bytes) const;

  std::string entry_path(const std::string& key) const;

 private:
  DiskCache() = default;
  uint64_t evict_locked(const std::string& keep);
  // Why the directory may not be trusted ("" when it may); checked once per configure.
  std::string dir_problem();

  mutable std::mutex mu_;
  std::string dir_;
  uint64_t max_bytes_ = 10ull << 30;
  bool enabled_ = false;
  bool write_failed_ = false;
  int64_t known_bytes_ = -1;  // this process's running estimate; -1: not scanned yet
  bool dir_checked_ = false;
  std::string dir_problem_;
};

}  // namespace tpu::engine

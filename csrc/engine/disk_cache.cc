#include "engine/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <thread>
#include <vector>

#include "hlo/builder.h"

namespace fs = std::filesystem;

namespace tpu::engine {

namespace {

constexpr char kMagic[8] = {'T', 'P', 'U', 'X', 'P', 'R', 'G', '\n'};
constexpr size_t kKeyLen = 32;       // hash128 hex
constexpr size_t kSumLen = 32;       // hash128 hex of the payload
constexpr size_t kHeaderLen = sizeof(kMagic) + 4 + kKeyLen + 8 + kSumLen;
constexpr const char* kSuffix = ".xpe";
constexpr const char* kTmpPrefix = ".tmp-";
// A temporary file this old belongs to a writer that died; scans remove it.
constexpr int64_t kStaleTmpSeconds = 600;

void put_le(std::string& s, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string errno_text(int err) { return std::strerror(err); }

// Writes all of `data` to `fd`; returns 0 or the errno of the failure.
int write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

// Reads the whole file; returns 0 or an errno (ENOENT: no entry). `owner` gets
// the file's owner (checked on the open descriptor: no race with a swap).
int read_file(const std::string& path, std::string* out, uid_t* owner) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno;
  struct stat st;
  int err = ::fstat(fd, &st) != 0 ? errno : (S_ISREG(st.st_mode) ? 0 : EISDIR);
  if (err != 0) {
    ::close(fd);
    return err;
  }
  *owner = st.st_uid;
  out->resize(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < out->size()) {
    ssize_t r = ::read(fd, &(*out)[got], out->size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  out->resize(got);
  return 0;
}

// Why `bytes` is not a valid entry for `key` ("" when it is); fills `payload`.
std::string validate(const std::string& bytes, const std::string& key, std::string* payload) {
  if (bytes.size() < kHeaderLen) return "truncated header";
  const char* p = bytes.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) return "not a torch_tpu cache entry";
  p += sizeof(kMagic);
  uint32_t version = static_cast<uint32_t>(get_le(p, 4));
  if (version != DiskCache::kFormatVersion)
    return "format version " + std::to_string(version) + ", expected " +
           std::to_string(DiskCache::kFormatVersion);
  p += 4;
  if (std::string(p, kKeyLen) != key) return "key mismatch";
  p += kKeyLen;
  uint64_t len = get_le(p, 8);
  p += 8;
  std::string sum(p, kSumLen);
  if (bytes.size() - kHeaderLen != len)
    return "payload is " + std::to_string(bytes.size() - kHeaderLen) + " bytes, header says " +
           std::to_string(len);
  payload->assign(bytes, kHeaderLen, std::string::npos);
  if (hlo::hash128(*payload) != sum) return "checksum mismatch";
  return "";
}

std::string unique_tmp_name(const std::string& key) {
  static std::atomic<uint64_t> counter{0};
  size_t tid = std::hash<std::thread::id>()(std::this_thread::get_id());
  return std::string(kTmpPrefix) + key + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(tid % 1000003) + "-" + std::to_string(counter++);
}

bool is_entry(const fs::path& p) {
  return p.extension() == kSuffix;
}
bool is_tmp(const fs::path& p) {
  return p.filename().string().rfind(kTmpPrefix, 0) == 0;
}

int64_t mtime_of(const struct stat& st) { return static_cast<int64_t>(st.st_mtime); }

struct FileInfo {
  std::string path;
  uint64_t size;
  int64_t mtime_ns;
};

// Entries in `dir` (and removes stale temporaries of dead writers).
std::vector<FileInfo> scan(const std::string& dir) {
  std::vector<FileInfo> files;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  if (ec) return files;
  int64_t now = static_cast<int64_t>(::time(nullptr));
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    struct stat st;
    if (::stat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (is_tmp(p)) {
      if (now - mtime_of(st) > kStaleTmpSeconds) ::unlink(p.c_str());
      continue;
    }
    if (!is_entry(p)) continue;
    int64_t ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    files.push_back({p.string(), static_cast<uint64_t>(st.st_size), ns});
  }
  return files;
}

}  // namespace

DiskCache& DiskCache::get() {
  static DiskCache* c = new DiskCache();  // leaked: used until process exit
  return *c;
}

void DiskCache::configure(const std::string& dir, uint64_t max_bytes, bool enabled) {
  std::lock_guard<std::mutex> g(mu_);
  dir_ = dir;
  max_bytes_ = max_bytes;
  enabled_ = enabled && !dir.empty();
  write_failed_ = false;
  known_bytes_ = -1;
  dir_checked_ = false;
  dir_problem_.clear();
}

std::string DiskCache::dir_problem() {
  std::lock_guard<std::mutex> g(mu_);
  if (dir_checked_) return dir_problem_;
  struct stat st;
  if (::stat(dir_.c_str(), &st) == 0) {  // a missing directory is created 0700 on store
    dir_checked_ = true;
    if (st.st_uid != ::geteuid())
      dir_problem_ = dir_ + " is owned by uid " + std::to_string(st.st_uid) + ", not this user (uid " +
                     std::to_string(::geteuid()) + ")";
    else if (st.st_mode & (S_IWGRP | S_IWOTH))
      dir_problem_ = dir_ + " is writable by other users (mode " +
                     std::to_string((st.st_mode >> 6) & 7) + std::to_string((st.st_mode >> 3) & 7) +
                     std::to_string(st.st_mode & 7) + "); chmod 700 it";
  }
  return dir_problem_;
}

bool DiskCache::enabled() const {
  std::lock_guard<std::mutex> g(mu_);
  return enabled_;
}
std::string DiskCache::dir() const {
  std::lock_guard<std::mutex> g(mu_);
  return dir_;
}
uint64_t DiskCache::max_bytes() const {
  std::lock_guard<std::mutex> g(mu_);
  return max_bytes_;
}

std::string DiskCache::entry_path(const std::string& key) const {
  return (fs::path(dir()) / (key + kSuffix)).string();
}

DiskCache::LoadResult DiskCache::load(const std::string& key) {
  LoadResult r;
  if (!enabled()) return r;
  std::string path = entry_path(key);
  std::string bytes;
  if (std::string why = dir_problem(); !why.empty()) {
    r.status = Load::kUnsafe;
    r.problem = why;
    return r;
  }
  uid_t owner = 0;
  int err = read_file(path, &bytes, &owner);
  if (err == ENOENT || err == ENOTDIR) {
    r.status = Load::kMissing;
    return r;
  }
  if (err == 0 && owner != ::geteuid()) {
    r.status = Load::kUnsafe;
    r.problem = path + " is owned by uid " + std::to_string(owner) + ", not this user (uid " +
                std::to_string(::geteuid()) + ")";
    return r;
  }
  if (err != 0) {
    r.status = Load::kBad;
    r.problem = path + ": " + errno_text(err);
    return r;
  }
  std::string why = validate(bytes, key, &r.payload);
  if (!why.empty()) {
    r.status = Load::kBad;
    r.problem = path + ": " + why;
    r.payload.clear();
    return r;
  }
  // Touch for LRU; failing (a read-only directory) only makes eviction less exact.
  ::utime(path.c_str(), nullptr);
  r.status = Load::kHit;
  return r;
}

DiskCache::StoreResult DiskCache::store(const std::string& key, const std::string& payload) {
  StoreResult r;
  std::string dir;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!enabled_ || write_failed_) {
      r.skipped = true;
      return r;
    }
    dir = dir_;
  }
  // Two stores (pipelined compiles finish together) can both fail before either
  // marks the cache: only the first counts and warns, the other is a skip, so a
  // process reports one write failure however its compiles interleave.
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> g(mu_);
    if (write_failed_) {
      r.skipped = true;
      return r;
    }
    write_failed_ = true;
    r.problem = what;
    return r;
  };
  if (!dir_problem().empty()) {  // never write where others can plant entries
    r.skipped = true;
    return r;
  }
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    fs::create_directories(dir, ec);
    if (ec) return fail("cannot create " + dir + ": " + ec.message());
    // Only this user may read, plant or replace programs this process will run.
    fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace, ec);
  }

  std::string file;
  file.reserve(kHeaderLen + payload.size());
  file.append(kMagic, sizeof(kMagic));
  put_le(file, kFormatVersion, 4);
  file.append(key);
  put_le(file, payload.size(), 8);
  file.append(hlo::hash128(payload));
  file.append(payload);

  std::string tmp = (fs::path(dir) / unique_tmp_name(key)).string();
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return fail("cannot write in " + dir + ": " + errno_text(errno));
  int err = write_all(fd, file.data(), file.size());
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), entry_path(key).c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    return fail("cannot write " + entry_path(key) + ": " + errno_text(err));
  }
  r.ok = true;
  r.bytes = file.size();

  std::lock_guard<std::mutex> g(mu_);
  if (known_bytes_ < 0) {
    uint64_t total = 0;
    for (const auto& f : scan(dir_)) total += f.size;
    known_bytes_ = static_cast<int64_t>(total);
  } else {
    known_bytes_ += static_cast<int64_t>(r.bytes);
  }
  if (static_cast<uint64_t>(known_bytes_) > max_bytes_) r.evicted = evict_locked(key);
  return r;
}

// Rescans (other processes write too) and removes the least recently used
// entries until the directory is under 90% of the bound, so that the next few
// stores do not each rescan. `keep` (just written, about to be used) goes last.
uint64_t DiskCache::evict_locked(const std::string& keep) {
  auto files = scan(dir_);
  uint64_t total = 0;
  for (const auto& f : files) total += f.size;
  std::string keep_path = (fs::path(dir_) / (keep + kSuffix)).string();
  std::sort(files.begin(), files.end(), [&](const FileInfo& a, const FileInfo& b) {
    bool ka = a.path == keep_path, kb = b.path == keep_path;
    if (ka != kb) return kb;  // the kept one sorts last
    return a.mtime_ns < b.mtime_ns;
  });
  uint64_t target = max_bytes_ / 10 * 9;
  uint64_t removed = 0;
  for (const auto& f : files) {
    if (total <= target) break;
    if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) {
      total -= f.size;
      removed++;
    }
  }
  known_bytes_ = static_cast<int64_t>(total);
  return removed;
}

uint64_t DiskCache::clear() {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir_, ec), end;
  if (ec) return 0;
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    const fs::path& p = it->path();
    if ((is_entry(p) || is_tmp(p)) && ::unlink(p.c_str()) == 0) removed++;
  }
  known_bytes_ = -1;
  write_failed_ = false;  // a user clearing the cache may have fixed the disk
  return removed;
}

void DiskCache::usage(uint64_t* entries, uint64_t* bytes) const {
  std::string d = dir();
  auto files = scan(d);
  *entries = files.size();
  *bytes = 0;
  for (const auto& f : files) *bytes += f.size;
}

}  // namespace tpu::engine

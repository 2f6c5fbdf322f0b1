#include "engine/transfer.h"

#include "engine/async_errors.h"

#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "engine/slot.h"

namespace tpu::engine {

using hlo::ElemType;

PJRT_Buffer_Type to_pjrt(ElemType t) {
  switch (t) {
    case ElemType::PRED: return PJRT_Buffer_Type_PRED;
    case ElemType::S8: return PJRT_Buffer_Type_S8;
    case ElemType::S16: return PJRT_Buffer_Type_S16;
    case ElemType::S32: return PJRT_Buffer_Type_S32;
    case ElemType::S64: return PJRT_Buffer_Type_S64;
    case ElemType::U8: return PJRT_Buffer_Type_U8;
    case ElemType::U16: return PJRT_Buffer_Type_U16;
    case ElemType::U32: return PJRT_Buffer_Type_U32;
    case ElemType::U64: return PJRT_Buffer_Type_U64;
    case ElemType::F16: return PJRT_Buffer_Type_F16;
    case ElemType::BF16: return PJRT_Buffer_Type_BF16;
    case ElemType::F32: return PJRT_Buffer_Type_F32;
    case ElemType::F64: return PJRT_Buffer_Type_F64;
    case ElemType::C64: return PJRT_Buffer_Type_C64;
    case ElemType::C128: return PJRT_Buffer_Type_C128;
    case ElemType::F8E4M3FN: return PJRT_Buffer_Type_F8E4M3FN;
    case ElemType::F8E5M2: return PJRT_Buffer_Type_F8E5M2;
    case ElemType::F8E4M3FNUZ: return PJRT_Buffer_Type_F8E4M3FNUZ;
    case ElemType::F8E5M2FNUZ: return PJRT_Buffer_Type_F8E5M2FNUZ;
  }
  throw std::invalid_argument("unknown element type");
}

ElemType from_pjrt(PJRT_Buffer_Type t) {
  switch (t) {
    case PJRT_Buffer_Type_PRED: return ElemType::PRED;
    case PJRT_Buffer_Type_S8: return ElemType::S8;
    case PJRT_Buffer_Type_S16: return ElemType::S16;
    case PJRT_Buffer_Type_S32: return ElemType::S32;
    case PJRT_Buffer_Type_S64: return ElemType::S64;
    case PJRT_Buffer_Type_U8: return ElemType::U8;
    case PJRT_Buffer_Type_U16: return ElemType::U16;
    case PJRT_Buffer_Type_U32: return ElemType::U32;
    case PJRT_Buffer_Type_U64: return ElemType::U64;
    case PJRT_Buffer_Type_F16: return ElemType::F16;
    case PJRT_Buffer_Type_BF16: return ElemType::BF16;
    case PJRT_Buffer_Type_F32: return ElemType::F32;
    case PJRT_Buffer_Type_F64: return ElemType::F64;
    case PJRT_Buffer_Type_C64: return ElemType::C64;
    case PJRT_Buffer_Type_C128: return ElemType::C128;
    case PJRT_Buffer_Type_F8E4M3FN: return ElemType::F8E4M3FN;
    case PJRT_Buffer_Type_F8E5M2: return ElemType::F8E5M2;
    case PJRT_Buffer_Type_F8E4M3FNUZ: return ElemType::F8E4M3FNUZ;
    case PJRT_Buffer_Type_F8E5M2FNUZ: return ElemType::F8E5M2FNUZ;
    default: break;
  }
  throw std::invalid_argument("unsupported PJRT buffer type " + std::to_string(int(t)));
}

std::shared_ptr<pjrt::Buffer> upload(const void* data, ElemType elem,
                                     const std::vector<int64_t>& dims, int device) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  metrics().bytes_to_device += static_cast<uint64_t>(n) * elem_size(elem);
  auto buf = Runtime::get().client().buffer_from_host(data, to_pjrt(elem), dims, device);
  track_ready(device, *buf);  // the device side of the copy may still be running
  return buf;
}

namespace {

// Shared zero buffers by (type, length, device). Bounded: buffers past kShareMax
// bytes are made each time (filling them costs more than the transfer's thread
// hop), and the cache starts over past kCacheMax bytes in all.
constexpr size_t kShareMax = size_t{1} << 20;
constexpr size_t kCacheMax = size_t{32} << 20;

struct ZeroKey {
  ElemType elem;
  int64_t n;
  int device;
  bool operator==(const ZeroKey& o) const {
    return elem == o.elem && n == o.n && device == o.device;
  }
};
struct ZeroKeyHash {
  size_t operator()(const ZeroKey& k) const {
    return std::hash<int64_t>()(k.n) ^ (static_cast<size_t>(k.elem) << 20) ^
           (static_cast<size_t>(k.device) << 28);
  }
};
struct ZeroCache {
  std::mutex mu;
  std::unordered_map<ZeroKey, std::shared_ptr<pjrt::Buffer>, ZeroKeyHash> bufs;
  size_t bytes = 0;
};
ZeroCache& zero_cache() {
  static auto* c = new ZeroCache();  // leaked: buffers must not outlive the client
  return *c;
}

std::shared_ptr<pjrt::Buffer> fresh_zeros(ElemType elem, int64_t n, int device) {
  std::vector<uint8_t> host(static_cast<size_t>(n) * elem_size(elem), 0);
  return Runtime::get().client().buffer_from_host(host.data(), to_pjrt(elem), {n}, device);
}

}  // namespace

std::shared_ptr<pjrt::Buffer> zeros(ElemType elem, int64_t n, int device) {
  const size_t bytes = static_cast<size_t>(n) * elem_size(elem);
  if (bytes > kShareMax) return fresh_zeros(elem, n, device);
  ZeroCache& c = zero_cache();
  const ZeroKey k{elem, n, device};
  {
    std::lock_guard<std::mutex> g(c.mu);
    auto it = c.bufs.find(k);
    if (it != c.bufs.end()) return it->second;
  }
  auto buf = fresh_zeros(elem, n, device);
  std::lock_guard<std::mutex> g(c.mu);
  if (c.bytes + bytes > kCacheMax) c.bufs.clear(), c.bytes = 0;
  if (c.bufs.emplace(k, buf).second) c.bytes += bytes;
  return buf;
}

void download(const pjrt::Buffer& buf, void* dst, size_t nbytes) {
  metrics().bytes_to_host += nbytes;
  try {
    buf.to_host(dst, nbytes);
  } catch (const pjrt::Error& e) {
    raise_read_failure(buf, e);  // names the op whose program failed to produce it
  }
}

}  // namespace tpu::engine

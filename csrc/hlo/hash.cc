// 128-bit non-cryptographic hash used for program cache keys.
//
// Two 64-bit lanes with different seeds and multipliers read the input as
// little-endian 64-bit words; each lane ends with a full avalanche finaliser.
// The lanes are independent enough that a collision in one is very unlikely to
// coincide with a collision in the other, which is all a cache key needs. The
// result must be stable across runs and machines (it names on-disk entries), so
// bytes are assembled explicitly instead of reading words in host byte order.
#include <cstdint>
#include <cstring>
#include <string>

#include "hlo/builder.h"

namespace tpu::hlo {
namespace {

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Avalanche: every input bit affects every output bit.
inline uint64_t finalize(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

inline uint64_t load_le(const unsigned char* p, size_t n) {
  uint64_t w = 0;
  for (size_t i = 0; i < n; ++i) w |= static_cast<uint64_t>(p[i]) << (8 * i);
  return w;
}

struct Lane {
  uint64_t h, k1, k2;
  int r;
  void add(uint64_t w) {
    w *= k1;
    w = rotl(w, 31);
    w *= k2;
    h ^= w;
    h = rotl(h, r) * 5 + 0x52dce729ULL;
  }
};

}  // namespace

std::string hash128(const std::string& bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  Lane a{0x9e3779b97f4a7c15ULL ^ n, 0x87c37b91114253d5ULL, 0x4cf5ad432745937fULL, 27};
  Lane b{0x6a09e667f3bcc909ULL ^ (n * 0x100000001b3ULL), 0xa0761d6478bd642fULL,
         0xe7037ed1a0b428dbULL, 29};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w = load_le(p + i, 8);
    a.add(w);
    b.add(w ^ 0x8ebc6af09c88c6e3ULL);
  }
  // The tail is padded with its length so "ab" and "ab\0" differ.
  uint64_t tail = load_le(p + i, n - i) ^ (static_cast<uint64_t>(n - i) << 59);
  a.add(tail);
  b.add(tail ^ 0x8ebc6af09c88c6e3ULL);
  uint64_t ha = finalize(a.h ^ b.h * 3);  // cross-mix so each half sees both lanes
  uint64_t hb = finalize(b.h ^ a.h * 7 ^ n);
  static const char* hex = "0123456789abcdef";
  std::string out(32, '0');
  for (int k = 0; k < 16; ++k) {
    out[15 - k] = hex[(ha >> (4 * k)) & 15];
    out[31 - k] = hex[(hb >> (4 * k)) & 15];
  }
  return out;
}

}  // namespace tpu::hlo

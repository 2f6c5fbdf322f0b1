// FFT primitives: _fft_r2c, _fft_c2r, _fft_c2c (every torch.fft.* function and
// stft/istft decompose into these three) through stablehlo.fft.
//
// stablehlo.fft transforms the innermost (at most three) dims, so the requested
// dims are transposed to the end and back, and longer dim lists run in chunks
// of three (the transform is separable). Scaling follows ATen: the forward
// transforms are unnormalised, the inverse ones are the plain sum with
// exp(+i...), and `normalization` (0 none, 1 by 1/sqrt(n), 2 by 1/n, where n is
// the product of the signal sizes) is applied on top. XLA's IFFT and IRFFT
// already divide by n, so inverse results are multiplied back by n first.
#include <algorithm>
#include <cmath>
#include <string>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using namespace nn;

constexpr size_t kMaxFftRank = 3;  // stablehlo.fft's limit on fft_length

ElemType complex_of(ElemType t) { return t == ElemType::F64 ? ElemType::C128 : ElemType::C64; }
ElemType real_of(ElemType t) { return t == ElemType::C128 ? ElemType::F64 : ElemType::F32; }

std::string i64_array(const std::vector<int64_t>& v) {
  std::string s = "array<i64: ";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + ">";
}

// One stablehlo.fft over `dims` (at most three) of x. For IRFFT, `real_len`
// is the real output length of the last dim (x's last dim must be
// real_len / 2 + 1); otherwise the signal sizes are x's sizes.
Value fft_dims(hlo::Builder& b, Value x, const std::vector<int64_t>& dims, const char* type,
               int64_t real_len = -1) {
  const int64_t r = x.rank();
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r; ++d)
    if (std::find(dims.begin(), dims.end(), d) == dims.end()) perm.push_back(d);
  perm.insert(perm.end(), dims.begin(), dims.end());
  const bool moved = perm != iota_dims(0, r);
  Value t = moved ? b.transpose(x, perm) : x;

  std::vector<int64_t> lengths(t.dims().end() - dims.size(), t.dims().end());
  hlo::TensorType rt = t.type;
  const std::string kind = type;
  if (kind == "RFFT") {
    rt.elem = complex_of(t.elem());
    rt.dims.back() = lengths.back() / 2 + 1;
  } else if (kind == "IRFFT") {
    rt.elem = real_of(t.elem());
    rt.dims.back() = lengths.back() = real_len;
  }
  Value y = b.generic("fft", {t},
                      "fft_type = #stablehlo<fft_type " + kind + ">, fft_length = " +
                          i64_array(lengths),
                      rt);
  if (!moved) return y;
  std::vector<int64_t> inv(r);
  for (int64_t i = 0; i < r; ++i) inv[perm[i]] = i;
  return b.transpose(y, inv);
}

// FFT or IFFT over any number of dims, three at a time.
Value c2c_dims(hlo::Builder& b, Value x, std::vector<int64_t> dims, bool forward) {
  while (!dims.empty()) {
    size_t k = std::min(dims.size(), kMaxFftRank);
    std::vector<int64_t> chunk(dims.end() - k, dims.end());
    dims.resize(dims.size() - k);
    x = fft_dims(b, x, chunk, forward ? "FFT" : "IFFT");
  }
  return x;
}

Value conj(hlo::Builder& b, Value z) {
  return b.generic("complex", {b.unary("real", z), b.neg(b.unary("imag", z))}, "", z.type);
}

// Along dim d of size m: element j moves to (m - j) mod m, i.e. the index a
// spectrum bin's conjugate partner sits at.
Value reflect(hlo::Builder& b, Value x, int64_t d) {
  const int64_t m = x.dims()[d];
  if (m <= 1) return x;
  std::vector<int64_t> start(x.rank(), 0), limit = x.dims(), one(x.rank(), 1);
  limit[d] = 1;
  Value head = b.slice(x, start, limit, one);
  start[d] = 1;
  limit[d] = m;
  return b.concatenate({head, b.reverse(b.slice(x, start, limit, one), {d})}, d);
}

int64_t product(const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

// Multiplies by `factor` unless it is 1.
Value scale(hlo::Builder& b, Value v, double factor) {
  return factor == 1.0 ? v : b.mul(v, scalar_like(b, factor, v));
}

// ATen's fft_norm_mode: the factor on an unnormalised transform of n points.
double norm_factor(int64_t normalization, int64_t n) {
  switch (normalization) {
    case 0: return 1.0;
    case 1: return 1.0 / std::sqrt(static_cast<double>(n));
    case 2: return 1.0 / static_cast<double>(n);
  }
  TORCH_CHECK_VALUE(false, "fft: invalid normalization mode ", normalization);
}

// The same for an inverse transform computed by XLA (which already divided by
// n): undo that division, then normalise as ATen asks.
double inverse_factor(int64_t normalization, int64_t n) {
  switch (normalization) {
    case 0: return static_cast<double>(n);
    case 1: return std::sqrt(static_cast<double>(n));
    case 2: return 1.0;
  }
  TORCH_CHECK_VALUE(false, "fft: invalid normalization mode ", normalization);
}

std::vector<int64_t> fft_dims_arg(const Ctx& c, int64_t rank) {
  std::vector<int64_t> dims = wrap_dims(c.ints(1), rank);
  for (size_t i = 0; i < dims.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      TORCH_CHECK_VALUE(dims[i] != dims[j], c.schema().name(), ": dim ", dims[i], " repeated");
  return dims;
}

// Zeros of the given type: the result when a transformed or batch dim is empty
// (stablehlo.fft rejects zero-length signals).
Value zeros(hlo::Builder& b, ElemType t, const std::vector<int64_t>& dims) {
  return b.splat_f(0, hlo::TensorType{t, dims});
}

// Float inputs compute in float32/float64; float16 has no complex XLA type to
// return (PyTorch's result would be complex32), so it is refused clearly.
ElemType real_compute_type(const Ctx& c, ElemType t) {
  if (t == ElemType::F32 || t == ElemType::F64) return t;
  throw c10::TypeError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                       c.schema().name() + ": unsupported dtype " +
                           std::string(c10::toString(c.dtype(0))) +
                           " (tpu FFTs take float32/float64 and complex64/complex128)");
}

ElemType complex_compute_type(const Ctx& c, ElemType t) {
  if (t == ElemType::C64 || t == ElemType::C128) return t;
  throw c10::TypeError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                       c.schema().name() + ": expected a complex64/complex128 input, got " +
                           std::string(c10::toString(c.dtype(0))));
}

// _fft_r2c(self, dim[], normalization, onesided)
std::vector<Value> fft_r2c(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = c.tensor(0);
  real_compute_type(c, x.elem());
  std::vector<int64_t> dims = fft_dims_arg(c, x.rank());
  TORCH_CHECK_VALUE(!dims.empty(), "_fft_r2c: dim must not be empty");
  const int64_t normalization = c.int_arg(2);
  const bool onesided = c.bool_arg(3);
  const int64_t last = dims.back(), n_last = x.dims()[last];

  std::vector<int64_t> out_dims = x.dims();
  if (onesided) out_dims[last] = n_last / 2 + 1;
  if (numel_of(x.dims()) == 0) return {zeros(b, complex_of(x.elem()), out_dims)};

  // RFFT along the last dim (with up to two more), then FFTs along the rest.
  const size_t k = std::min(dims.size(), kMaxFftRank);
  std::vector<int64_t> first(dims.end() - k, dims.end()), rest(dims.begin(), dims.end() - k);
  Value y = c2c_dims(b, fft_dims(b, x, first, "RFFT"), rest, true);

  if (!onesided && n_last > 1) {
    // Bins n/2+1 .. n-1 of the last dim are conjugates of the bins at the
    // reflected index of every transformed dim: X[k] = conj(X[-k mod n]).
    Value partner = y;
    for (size_t i = 0; i + 1 < dims.size(); ++i) partner = reflect(b, partner, dims[i]);
    const int64_t tail = n_last - (n_last / 2 + 1);
    if (tail > 0) {
      std::vector<int64_t> start(y.rank(), 0), limit = y.dims(), one(y.rank(), 1);
      start[last] = 1;
      limit[last] = 1 + tail;
      Value upper = b.reverse(b.slice(partner, start, limit, one), {last});
      y = b.concatenate({y, conj(b, upper)}, last);
    }
  }
  return {scale(b, y, norm_factor(normalization, product(x.dims(), dims)))};
}

// _fft_c2c(self, dim[], normalization, forward)
std::vector<Value> fft_c2c(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = c.tensor(0);
  complex_compute_type(c, x.elem());
  std::vector<int64_t> dims = fft_dims_arg(c, x.rank());
  const int64_t normalization = c.int_arg(2);
  const bool forward = c.bool_arg(3);
  if (dims.empty()) return {x};
  if (numel_of(x.dims()) == 0) return {zeros(b, x.elem(), x.dims())};
  const int64_t n = product(x.dims(), dims);
  Value y = c2c_dims(b, x, dims, forward);
  return {scale(b, y, forward ? norm_factor(normalization, n) : inverse_factor(normalization, n))};
}

// _fft_c2r(self, dim[], normalization, last_dim_size)
std::vector<Value> fft_c2r(Ctx& c) {
  hlo::Builder& b = c.b;
  Value x = c.tensor(0);
  complex_compute_type(c, x.elem());
  std::vector<int64_t> dims = fft_dims_arg(c, x.rank());
  TORCH_CHECK_VALUE(!dims.empty(), "_fft_c2r: dim must not be empty");
  const int64_t normalization = c.int_arg(2);
  const int64_t len = c.int_arg(3);
  TORCH_CHECK_VALUE(len >= 1, "_fft_c2r: invalid last_dim_size (", len, "), expected >= 1");
  const int64_t last = dims.back();

  std::vector<int64_t> out_dims = x.dims();
  out_dims[last] = len;
  if (numel_of(out_dims) == 0 || numel_of(x.dims()) == 0)
    return {zeros(b, real_of(x.elem()), out_dims)};

  // As ATen's CPU kernel: an inverse C2C over the leading dims, then a 1-D C2R
  // over the last one. (A multi-dim C2R disagrees on inputs that are not
  // exactly Hermitian, which PyTorch accepts.)
  std::vector<int64_t> lead(dims.begin(), dims.end() - 1);
  const int64_t n = product(x.dims(), lead) * len;
  Value y = c2c_dims(b, x, lead, false);

  // C2R reads exactly len/2 + 1 bins: drop the extra ones, zero-fill missing.
  const int64_t half = len / 2 + 1, have = y.dims()[last];
  if (have > half) {
    std::vector<int64_t> start(y.rank(), 0), limit = y.dims(), one(y.rank(), 1);
    limit[last] = half;
    y = b.slice(y, start, limit, one);
  } else if (have < half) {
    std::vector<int64_t> lo(y.rank(), 0), hi(y.rank(), 0);
    hi[last] = half - have;
    y = b.pad(y, b.constant_f(0, y.elem()), lo, hi, lo);
  }
  y = fft_dims(b, y, {last}, "IRFFT", len);
  return {scale(b, y, inverse_factor(normalization, n))};
}

}  // namespace

void register_fft() {
  add("_fft_r2c", fft_r2c);
  add("_fft_c2r", fft_c2r);
  add("_fft_c2c", fft_c2c);
}

}  // namespace tpu::lower

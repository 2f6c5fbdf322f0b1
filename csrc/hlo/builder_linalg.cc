// dot_general, convolution, gather and rng_bit_generator: dimension-number
// attributes and result shapes.
#include <algorithm>
#include <atomic>
#include <string>

#include "hlo/builder_impl.h"
#include "hlo/host_gemm.h"

namespace tpu::hlo {
namespace {

bool contains(const std::vector<int64_t>& v, int64_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool is_int(ElemType t) { return is_signed_int(t) || is_unsigned_int(t); }

// Output size of one windowed dimension (convolution, reduce_window).
int64_t window_out(int64_t in, int64_t lhs_dil, int64_t lo, int64_t hi, int64_t win,
                   int64_t win_dil, int64_t stride) {
  const int64_t padded = (in > 0 ? (in - 1) * lhs_dil + 1 : 0) + lo + hi;
  const int64_t eff = (win > 0 ? (win - 1) * win_dil + 1 : 0);
  if (padded < eff || padded < 0) return 0;
  return (padded - eff) / stride + 1;
}

// One "[b, f, 0, 1]" layout of the pretty #stablehlo.conv syntax.
std::string conv_layout(const std::string& op, int64_t rank, int64_t d0, char c0, int64_t d1,
                        char c1, const std::vector<int64_t>& spatial) {
  std::vector<std::string> slot(static_cast<size_t>(rank));
  std::vector<int64_t> all = spatial;
  all.push_back(d0);
  all.push_back(d1);
  check_dim_list(op, all, rank, "layout dimensions");
  slot[d0] = std::string(1, c0);
  slot[d1] = std::string(1, c1);
  for (size_t k = 0; k < spatial.size(); ++k) slot[spatial[k]] = std::to_string(k);
  std::string s = "[";
  for (size_t i = 0; i < slot.size(); ++i) s += (i ? ", " : "") + slot[i];
  return s + "]";
}

}  // namespace

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::DEFAULT: return "DEFAULT";
    case Precision::HIGH: return "HIGH";
    case Precision::HIGHEST: return "HIGHEST";
  }
  return "HIGHEST";
}

std::string Builder::Impl::precision_attr(ElemType t) const {
  if (t != ElemType::F32 && t != ElemType::C64) return "";
  const std::string one = std::string("#stablehlo<precision ") + precision_name(f32_precision) + ">";
  return ", precision_config = [" + one + ", " + one + "]";
}

void Builder::set_float32_precision(Precision p) { impl_->f32_precision = p; }
Precision Builder::float32_precision() const { return impl_->f32_precision; }

namespace {

std::atomic<bool> host_gemm_on{false};

// The custom call that computes this dot_general (set_host_gemm), or "" when its
// form is not one a BLAS takes or it is too small to be worth a call out.
std::string host_gemm_target(const Value& lhs, const Value& rhs,
                             const std::vector<int64_t>& lhs_batch,
                             const std::vector<int64_t>& rhs_batch,
                             const std::vector<int64_t>& lhs_contract,
                             const std::vector<int64_t>& rhs_contract) {
  const int64_t nb = static_cast<int64_t>(lhs_batch.size());
  if (lhs_contract.size() != 1 || nb > 1 || lhs.rank() != 2 + nb || rhs.rank() != 2 + nb)
    return "";
  if (nb == 1 && (lhs_batch[0] != 0 || rhs_batch[0] != 0)) return "";
  const int64_t lc = lhs_contract[0], rc = rhs_contract[0];
  // lhs [.., m, k] as stored, or [.., k, m] (transposed); rhs [.., k, n] or [.., n, k].
  const bool ta = lc == nb, tb = rc == nb + 1;
  int64_t work = lhs.dims()[lc];
  for (int64_t d : lhs.dims()) work = d == 0 ? 0 : work;
  for (int64_t d : rhs.dims()) work = d == 0 ? 0 : work;
  work *= lhs.dims()[ta ? nb + 1 : nb] * rhs.dims()[tb ? nb : nb + 1] * (nb ? lhs.dims()[0] : 1);
  if (work < kHostGemmMinWork) return "";
  return std::string("torch_tpu.gemm_") + (ta ? "t" : "n") + (tb ? "t" : "n");
}

}  // namespace

void set_host_gemm(bool on) { host_gemm_on = on; }
bool host_gemm() { return host_gemm_on; }

int64_t window_output_size(int64_t in, int64_t lhs_dil, int64_t lo, int64_t hi, int64_t win,
                           int64_t win_dil, int64_t stride) {
  return window_out(in, lhs_dil, lo, hi, win, win_dil, stride);
}

Value Builder::dot_general(Value lhs, Value rhs, const std::vector<int64_t>& lhs_batch,
                           const std::vector<int64_t>& rhs_batch,
                           const std::vector<int64_t>& lhs_contract,
                           const std::vector<int64_t>& rhs_contract, ElemType result) {
  const std::string op = "dot_general";
  if (lhs.elem() != rhs.elem())
    fail(op, "operand element types differ: " + lhs.type.str() + " vs " + rhs.type.str());
  if (lhs_batch.size() != rhs_batch.size() || lhs_contract.size() != rhs_contract.size())
    fail(op, "batching/contracting dimension lists differ in length");
  std::vector<int64_t> lall = lhs_batch, rall = rhs_batch;
  lall.insert(lall.end(), lhs_contract.begin(), lhs_contract.end());
  rall.insert(rall.end(), rhs_contract.begin(), rhs_contract.end());
  check_dim_list(op, lall, lhs.rank(), "lhs batching+contracting dimensions");
  check_dim_list(op, rall, rhs.rank(), "rhs batching+contracting dimensions");
  for (size_t i = 0; i < lall.size(); ++i)
    if (lhs.dims()[lall[i]] != rhs.dims()[rall[i]])
      fail(op, "size mismatch between lhs dim " + std::to_string(lall[i]) + " and rhs dim " +
                   std::to_string(rall[i]) + " (" + lhs.type.str() + ", " + rhs.type.str() + ")");
  TensorType rt{result, {}};
  for (int64_t d : lhs_batch) rt.dims.push_back(lhs.dims()[d]);
  for (int64_t i = 0; i < lhs.rank(); ++i)
    if (!contains(lall, i)) rt.dims.push_back(lhs.dims()[i]);
  for (int64_t i = 0; i < rhs.rank(); ++i)
    if (!contains(rall, i)) rt.dims.push_back(rhs.dims()[i]);
  if (host_gemm() && lhs.elem() == ElemType::F32 && result == ElemType::F32) {
    const std::string target = host_gemm_target(lhs, rhs, lhs_batch, rhs_batch, lhs_contract,
                                                rhs_contract);
    if (!target.empty())
      return impl_->emit("custom_call", {lhs, rhs}, {},
                         "call_target_name = \"" + target + "\", api_version = 4 : i32", {rt})[0];
  }
  // Empty lists are left out: the attribute parser treats every field as optional.
  std::string dn;
  auto field = [&](const char* name, const std::vector<int64_t>& v) {
    if (v.empty()) return;
    if (!dn.empty()) dn += ", ";
    dn += std::string(name) + " = " + dims_str(v);
  };
  field("lhs_batching_dimensions", lhs_batch);
  field("rhs_batching_dimensions", rhs_batch);
  field("lhs_contracting_dimensions", lhs_contract);
  field("rhs_contracting_dimensions", rhs_contract);
  return impl_->emit(op, {lhs, rhs}, {},
                     "dot_dimension_numbers = #stablehlo.dot<" + dn + ">" +
                         impl_->precision_attr(lhs.elem()),
                     {rt})[0];
}

Value Builder::convolution(Value lhs, Value rhs, const ConvDims& d,
                           const std::vector<int64_t>& window_strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding,
                           const std::vector<int64_t>& lhs_dilation,
                           const std::vector<int64_t>& rhs_dilation, int64_t feature_group_count,
                           int64_t batch_group_count, const TensorType& result) {
  const std::string op = "convolution";
  const int64_t n = static_cast<int64_t>(d.input_spatial.size());
  const size_t ns = static_cast<size_t>(n);
  if (lhs.rank() != n + 2 || rhs.rank() != n + 2 || result.rank() != n + 2 ||
      d.kernel_spatial.size() != ns || d.output_spatial.size() != ns)
    fail(op, "ranks of " + lhs.type.str() + ", " + rhs.type.str() + ", " + result.str() +
                 " do not fit " + std::to_string(n) + " spatial dimensions");
  if (lhs.elem() != rhs.elem())
    fail(op, "operand element types differ: " + lhs.type.str() + " vs " + rhs.type.str());
  // Empty vectors mean the defaults (stride 1, no padding, no dilation).
  auto ones = [&](const std::vector<int64_t>& v, const char* what) {
    if (v.empty()) return std::vector<int64_t>(ns, 1);
    if (v.size() != ns) fail(op, std::string(what) + " needs one entry per spatial dimension");
    for (int64_t x : v)
      if (x < 1) fail(op, std::string(what) + " entries must be >= 1, got " + dims_str(v));
    return v;
  };
  const auto strides = ones(window_strides, "window_strides");
  const auto ldil = ones(lhs_dilation, "lhs_dilation");
  const auto rdil = ones(rhs_dilation, "rhs_dilation");
  auto pads = padding;
  if (pads.empty()) pads.assign(ns, {0, 0});
  if (pads.size() != ns) fail(op, "padding needs one pair per spatial dimension");
  const std::string in_l = conv_layout(op, n + 2, d.input_batch, 'b', d.input_feature, 'f',
                                       d.input_spatial);
  const std::string k_l = conv_layout(op, n + 2, d.kernel_output_feature, 'o',
                                      d.kernel_input_feature, 'i', d.kernel_spatial);
  const std::string out_l = conv_layout(op, n + 2, d.output_batch, 'b', d.output_feature, 'f',
                                        d.output_spatial);
  // Expected result shape, so a wrong explicit result type fails here.
  const int64_t fg = feature_group_count, bg = batch_group_count;
  const int64_t in_f = lhs.dims()[d.input_feature], in_b = lhs.dims()[d.input_batch];
  const int64_t k_in = rhs.dims()[d.kernel_input_feature];
  const int64_t k_out = rhs.dims()[d.kernel_output_feature];
  if (fg < 1 || bg < 1 || (fg > 1 && bg > 1))
    fail(op, "feature_group_count and batch_group_count must be >= 1, not both > 1");
  if (in_f % fg != 0 || in_f / fg != k_in || k_out % fg != 0)
    fail(op, "input features " + std::to_string(in_f) + " / feature_group_count " +
                 std::to_string(fg) + " must equal kernel input features " + std::to_string(k_in));
  if (in_b % bg != 0 || k_out % bg != 0)
    fail(op, "batch_group_count " + std::to_string(bg) + " must divide batch and output features");
  std::vector<int64_t> expect(static_cast<size_t>(n + 2));
  expect[d.output_batch] = in_b / bg;
  expect[d.output_feature] = k_out;
  for (size_t k = 0; k < ns; ++k)
    expect[d.output_spatial[k]] =
        window_out(lhs.dims()[d.input_spatial[k]], ldil[k], pads[k].first, pads[k].second,
                   rhs.dims()[d.kernel_spatial[k]], rdil[k], strides[k]);
  if (expect != result.dims)
    fail(op, "result " + result.str() + " does not match the computed shape " + dims_str(expect));

  std::string attrs = "dimension_numbers = #stablehlo.conv<" + in_l + "x" + k_l + "->" + out_l +
                      ">, window_strides = " + i64_array(strides);
  bool any_pad = false;
  for (const auto& p : pads) any_pad = any_pad || p.first != 0 || p.second != 0;
  if (any_pad) attrs += ", padding = " + padding_attr(pads);
  attrs += ", lhs_dilation = " + i64_array(ldil) + ", rhs_dilation = " + i64_array(rdil) +
           ", feature_group_count = " + std::to_string(fg) +
           " : i64, batch_group_count = " + std::to_string(bg) + " : i64" +
           impl_->precision_attr(lhs.elem());
  return impl_->emit(op, {lhs, rhs}, {}, attrs, {result})[0];
}

Value Builder::gather(Value operand, Value indices, const GatherDims& g,
                      const std::vector<int64_t>& slice_sizes, const TensorType& result,
                      bool indices_are_sorted) {
  const std::string op = "gather";
  if (!is_int(indices.elem())) fail(op, "indices must be integers, got " + indices.type.str());
  if (static_cast<int64_t>(slice_sizes.size()) != operand.rank())
    fail(op, "slice_sizes " + dims_str(slice_sizes) + " for operand " + operand.type.str());
  for (int64_t i = 0; i < operand.rank(); ++i)
    if (slice_sizes[i] < 0 || slice_sizes[i] > operand.dims()[i])
      fail(op, "slice_sizes " + dims_str(slice_sizes) + " exceed operand " + operand.type.str());
  const int64_t ivd = g.index_vector_dim;
  if (ivd < 0 || ivd > indices.rank())
    fail(op, "index_vector_dim " + std::to_string(ivd) + " out of range");
  const int64_t index_len = ivd < indices.rank() ? indices.dims()[ivd] : 1;
  if (static_cast<int64_t>(g.start_index_map.size()) != index_len)
    fail(op, "start_index_map " + dims_str(g.start_index_map) + " must have " +
                 std::to_string(index_len) + " entries");
  check_dim_list(op, g.start_index_map, operand.rank(), "start_index_map");
  std::vector<int64_t> dropped = g.collapsed_slice_dims;
  dropped.insert(dropped.end(), g.operand_batching_dims.begin(), g.operand_batching_dims.end());
  check_dim_list(op, dropped, operand.rank(), "collapsed_slice_dims+operand_batching_dims");
  for (int64_t c : dropped)
    if (slice_sizes[c] > 1) fail(op, "collapsed/batching dimensions need slice size <= 1");
  if (g.operand_batching_dims.size() != g.start_indices_batching_dims.size())
    fail(op, "operand_batching_dims and start_indices_batching_dims differ in length");
  for (int64_t b : g.start_indices_batching_dims)
    if (b < 0 || b >= indices.rank() || b == ivd)
      fail(op, "start_indices_batching_dims " + dims_str(g.start_indices_batching_dims) +
                   " out of range");
  // Result: offset_dims positions take the kept slice sizes, the rest take the
  // batch dimensions of the indices, each in order.
  std::vector<int64_t> batch, offsets;
  for (int64_t i = 0; i < indices.rank(); ++i)
    if (i != ivd) batch.push_back(indices.dims()[i]);
  for (int64_t i = 0; i < operand.rank(); ++i)
    if (!contains(dropped, i)) offsets.push_back(slice_sizes[i]);
  if (g.offset_dims.size() != offsets.size())
    fail(op, "offset_dims " + dims_str(g.offset_dims) + " must have " +
                 std::to_string(offsets.size()) + " entries");
  const int64_t rrank = static_cast<int64_t>(batch.size() + offsets.size());
  check_dim_list(op, g.offset_dims, rrank, "offset_dims");
  if (!std::is_sorted(g.offset_dims.begin(), g.offset_dims.end()))
    fail(op, "offset_dims must be sorted");
  std::vector<int64_t> expect;
  size_t bi = 0, oi = 0;
  for (int64_t i = 0; i < rrank; ++i)
    expect.push_back(contains(g.offset_dims, i) ? offsets[oi++] : batch[bi++]);
  if (result.elem != operand.elem() || result.dims != expect)
    fail(op, "result " + result.str() + " does not match the computed " +
                 TensorType{operand.elem(), expect}.str());
  std::string dn = "offset_dims = " + dims_str(g.offset_dims) +
                   ", collapsed_slice_dims = " + dims_str(g.collapsed_slice_dims) +
                   ", operand_batching_dims = " + dims_str(g.operand_batching_dims) +
                   ", start_indices_batching_dims = " + dims_str(g.start_indices_batching_dims) +
                   ", start_index_map = " + dims_str(g.start_index_map) +
                   ", index_vector_dim = " + std::to_string(ivd);
  std::string attrs = "dimension_numbers = #stablehlo.gather<" + dn +
                      ">, slice_sizes = " + i64_array(slice_sizes) +
                      ", indices_are_sorted = " + (indices_are_sorted ? "true" : "false");
  return impl_->emit(op, {operand, indices}, {}, attrs, {result})[0];
}

std::pair<Value, Value> Builder::rng_bit_generator(Value state, const TensorType& result) {
  const std::string op = "rng_bit_generator";
  if (state.elem() != ElemType::U64 || state.rank() != 1 ||
      (state.dims()[0] != 2 && state.dims()[0] != 3))
    fail(op, "PHILOX state must be tensor<2xui64> or tensor<3xui64>, got " + state.type.str());
  if (!(is_int(result.elem) || is_float(result.elem)))
    fail(op, "output must be integer or float, got " + result.str());
  auto r = impl_->emit(op, {state}, {}, "rng_algorithm = #stablehlo<rng_algorithm PHILOX>",
                       {state.type, result});
  return {r[0], r[1]};
}

}  // namespace tpu::hlo

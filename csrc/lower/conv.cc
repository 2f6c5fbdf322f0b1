// Convolutions. A PrivateUse1 device receives aten::convolution_overrideable
// and aten::convolution_backward_overrideable (1d/2d/3d, stride, padding,
// dilation, groups, transposed). Everything maps onto stablehlo.convolution:
//  - transposed conv = conv of the stride-dilated input with the spatially
//    reversed kernel whose in/out features are swapped per group;
//  - grad_input of a conv is a transposed conv of grad_output (and vice versa);
//  - grad_weight is a conv of input with grad_output where the channel dims play
//    the batch role and groups become batch_group_count.
#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using namespace nn;
using Dims = hlo::Builder::ConvDims;
using Pads = std::vector<std::pair<int64_t, int64_t>>;

struct Geom {
  std::vector<int64_t> stride, pad, dil, out_pad;
  int64_t groups = 1;
  bool transposed = false;
};

// Spreads a possibly length-1 list over n spatial dims.
std::vector<int64_t> expand(std::vector<int64_t> v, size_t n, int64_t dflt) {
  if (v.empty()) v.push_back(dflt);
  if (v.size() == 1 && n > 1) v.assign(n, v[0]);
  return v;
}

Geom geom(const Ctx& c, size_t first, size_t nsp) {
  Geom g;
  g.stride = expand(c.ints(first), nsp, 1);
  g.pad = expand(c.ints(first + 1), nsp, 0);
  g.dil = expand(c.ints(first + 2), nsp, 1);
  g.transposed = c.bool_arg(first + 3);
  g.out_pad = expand(c.ints(first + 4), nsp, 0);
  g.groups = c.int_arg(first + 5);
  return g;
}

// Batch, feature, spatial... for lhs, kernel (out, in, spatial...) and output.
Dims nchw(size_t nsp) {
  Dims d;
  for (size_t i = 0; i < nsp; ++i) {
    d.input_spatial.push_back(2 + i);
    d.kernel_spatial.push_back(2 + i);
    d.output_spatial.push_back(2 + i);
  }
  return d;
}

// stablehlo.convolution with its result type computed from the operands.
// float16/bfloat16 operands accumulate in float32 and round once, as cuDNN and
// PyTorch's CPU convolutions do.
Value conv(hlo::Builder& b, Value lhs, Value rhs, const Dims& d, const std::vector<int64_t>& strides,
           const Pads& pads, const std::vector<int64_t>& lhs_dil, const std::vector<int64_t>& rhs_dil,
           int64_t fgc, int64_t bgc) {
  std::vector<int64_t> out(lhs.rank());
  out[d.output_batch] = lhs.dims()[d.input_batch] / bgc;
  out[d.output_feature] = rhs.dims()[d.kernel_output_feature];
  for (size_t i = 0; i < d.input_spatial.size(); ++i) {
    int64_t in = lhs.dims()[d.input_spatial[i]], k = rhs.dims()[d.kernel_spatial[i]];
    int64_t in_eff = (in - 1) * lhs_dil[i] + 1 + pads[i].first + pads[i].second;
    int64_t k_eff = (k - 1) * rhs_dil[i] + 1;
    out[d.output_spatial[i]] = in_eff >= k_eff ? (in_eff - k_eff) / strides[i] + 1 : 0;
  }
  Value y = b.convolution(lhs, rhs, d, strides, pads, lhs_dil, rhs_dil, fgc, bgc,
                          {opmath(lhs.elem()), out});
  return b.convert(y, lhs.elem());
}

// [A, B, k...] weight of a grouped conv -> [g*B, A/g, k...]: swaps the roles
// of the two feature dims within each group.
Value swap_features(hlo::Builder& b, Value w, int64_t g) {
  std::vector<int64_t> d = w.dims();
  std::vector<int64_t> split = {g, d[0] / g, d[1]};
  split.insert(split.end(), d.begin() + 2, d.end());
  Value r = b.reshape(w, split);
  std::vector<int64_t> perm = {0, 2, 1};
  for (int64_t i = 3; i < r.rank(); ++i) perm.push_back(i);
  r = b.transpose(r, perm);
  std::vector<int64_t> out = {g * d[1], d[0] / g};
  out.insert(out.end(), d.begin() + 2, d.end());
  return b.reshape(r, out);
}

// Transposed convolution of x [N, A, ...] with weight w [A, B/g, k...]
// producing `target` spatial sizes (the output_padding is implied by them).
Value conv_transpose(hlo::Builder& b, Value x, Value w, const Geom& g,
                     const std::vector<int64_t>& target) {
  size_t nsp = static_cast<size_t>(x.rank() - 2);
  Value k = b.reverse(swap_features(b, w, g.groups), iota_dims(2, w.rank()));
  Pads pads;
  std::vector<int64_t> ones(nsp, 1);
  for (size_t i = 0; i < nsp; ++i) {
    int64_t ks = w.dims()[2 + i], o = x.dims()[2 + i];
    int64_t lo = g.dil[i] * (ks - 1) - g.pad[i];
    int64_t hi = target[i] - 1 - (o - 1) * g.stride[i] + g.pad[i];
    pads.push_back({lo, hi});
  }
  return conv(b, x, k, nchw(nsp), ones, pads, g.stride, g.dil, g.groups, 1);
}

// Ordinary convolution of x [N, C, ...] with w [O, C/g, k...].
Value conv_forward(hlo::Builder& b, Value x, Value w, const Geom& g) {
  size_t nsp = static_cast<size_t>(x.rank() - 2);
  Pads pads;
  for (size_t i = 0; i < nsp; ++i) pads.push_back({g.pad[i], g.pad[i]});
  return conv(b, x, w, nchw(nsp), g.stride, pads, std::vector<int64_t>(nsp, 1), g.dil, g.groups, 1);
}

// d(loss)/d(w) of y = conv(x, w) given gy, for a kernel of spatial sizes ks.
// Result [O, C/g, k...].
Value conv_weight_grad(hlo::Builder& b, Value x, Value gy, const Geom& g,
                       const std::vector<int64_t>& ks) {
  size_t nsp = static_cast<size_t>(x.rank() - 2);
  Pads pads;
  for (size_t i = 0; i < nsp; ++i) {
    int64_t in = x.dims()[2 + i], o = gy.dims()[2 + i];
    int64_t hi = (ks[i] - 1) * g.dil[i] + (o - 1) * g.stride[i] + 1 - in - g.pad[i];
    if (hi < 0) {  // trailing input elements no window reaches
      std::vector<int64_t> lim = x.dims();
      lim[2 + i] = in + hi;
      x = b.slice(x, std::vector<int64_t>(x.rank(), 0), lim, std::vector<int64_t>(x.rank(), 1));
      hi = 0;
    }
    pads.push_back({g.pad[i], hi});
  }
  Dims d;
  d.input_batch = 1;
  d.input_feature = 0;
  d.kernel_input_feature = 0;
  d.kernel_output_feature = 1;
  d.output_batch = 1;
  d.output_feature = 0;
  for (size_t i = 0; i < nsp; ++i) {
    d.input_spatial.push_back(2 + i);
    d.kernel_spatial.push_back(2 + i);
    d.output_spatial.push_back(2 + i);
  }
  return conv(b, x, gy, d, g.dil, pads, std::vector<int64_t>(nsp, 1), g.stride, 1, g.groups);
}

ElemType conv_type(const Ctx& c) { return to_elem(result_type(c, {0, 1})); }

}  // namespace

void register_conv() {
  // convolution_overrideable(input, weight, bias?, stride, padding, dilation,
  //                          transposed, output_padding, groups)
  add("convolution_overrideable", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = conv_type(c);
    Value x = cast(b, c.tensor(0), t), w = cast(b, c.tensor(1), t);
    size_t nsp = static_cast<size_t>(x.rank() - 2);
    Geom g = geom(c, 3, nsp);
    Value y;
    if (g.transposed) {
      std::vector<int64_t> target;
      for (size_t i = 0; i < nsp; ++i)
        target.push_back((x.dims()[2 + i] - 1) * g.stride[i] - 2 * g.pad[i] +
                         g.dil[i] * (w.dims()[2 + i] - 1) + g.out_pad[i] + 1);
      y = conv_transpose(b, x, w, g, target);
    } else {
      y = conv_forward(b, x, w, g);
    }
    if (auto bias = c.opt_tensor(2)) y = b.add(y, per_channel(b, cast(b, *bias, t), y.dims(), 1));
    return {y};
  });
  // convolution_backward_overrideable(grad_output, input, weight, stride, padding,
  //     dilation, transposed, output_padding, groups, output_mask)
  add("convolution_backward_overrideable", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = to_elem(result_type(c, {0, 1, 2}));
    Value gy = cast(b, c.tensor(0), t), x = cast(b, c.tensor(1), t), w = cast(b, c.tensor(2), t);
    size_t nsp = static_cast<size_t>(x.rank() - 2);
    Geom g = geom(c, 3, nsp);
    auto mask = c.value(9).toBoolList();
    std::vector<int64_t> in_sp(x.dims().begin() + 2, x.dims().end());
    std::vector<int64_t> ks(w.dims().begin() + 2, w.dims().end());
    Value gx = zeros_like(b, x), gw = zeros_like(b, w);
    if (mask.get(0)) gx = g.transposed ? conv_forward(b, gy, w, g) : conv_transpose(b, gy, w, g, in_sp);
    if (mask.get(0) && g.transposed && gx.dims() != x.dims()) {
      // An output_padding of at least the stride (allowed when below the
      // dilation) adds output rows no input position produced: the forward conv
      // of grad_output then yields positions past the input, which get no grad.
      std::vector<int64_t> start(x.rank(), 0);
      gx = b.slice(gx, start, x.dims(), std::vector<int64_t>(x.rank(), 1));
    }
    if (mask.get(1)) gw = g.transposed ? conv_weight_grad(b, gy, x, g, ks) : conv_weight_grad(b, x, gy, g, ks);
    std::vector<int64_t> red = {0};
    for (int64_t i = 2; i < gy.rank(); ++i) red.push_back(i);
    // The bias gradient sums grad_output over batch and positions: bfloat16/
    // float16 accumulate in float32 and round once, as PyTorch's CPU convolution
    // does (a bfloat16 accumulator stalls: 8192 terms of ~1 summed to 5% of the sum).
    Value gb = cast(b, reduce_sum(b, cast(b, gy, opmath(t)), red, false), t);
    return {gx, gw, gb};
  });
}

}  // namespace tpu::lower

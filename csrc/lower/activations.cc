// Activation functions and their backward kernels: gelu (erf and tanh forms),
// silu, mish, leaky_relu, hardtanh, elu, softplus, hardswish, hardsigmoid,
// log_sigmoid, glu, prelu, clamp_min/clamp_max, logit, sgn, erf.
// All compute in opmath (f32 for half types); scalar parameters (slopes,
// bounds, beta...) are runtime values.
#include <cmath>

#include "lower/nn_common.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;
using namespace nn;

Value k(hlo::Builder& b, double f, Value like) { return scalar_like(b, f, like); }

// erf via CHLO, which XLA expands into its own accurate f32/f64 approximation.
Value erf(hlo::Builder& b, Value x) { return b.generic("chlo.erf", {x}, "", x.type); }

Value sigmoid(hlo::Builder& b, Value x) { return b.unary("logistic", x); }

Value softplus1(hlo::Builder& b, Value x) {
  // log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|).
  Value z = zeros_like(b, x);
  return b.add(b.max(x, z), b.unary("log_plus_one", b.unary("exponential", b.neg(b.unary("abs", x)))));
}

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;
constexpr double kGeluC = 0.044715;

Value gelu(hlo::Builder& b, Value x, const std::string& approx) {
  if (approx == "tanh") {
    Value inner = b.mul(k(b, kSqrt2OverPi, x), b.add(x, b.mul(k(b, kGeluC, x), b.mul(x, b.mul(x, x)))));
    return b.mul(b.mul(k(b, 0.5, x), x), b.add(k(b, 1, x), b.unary("tanh", inner)));
  }
  return b.mul(b.mul(k(b, 0.5, x), x), b.add(k(b, 1, x), erf(b, b.mul(x, k(b, kSqrt1_2, x)))));
}

Value gelu_grad(hlo::Builder& b, Value g, Value x, const std::string& approx) {
  if (approx == "tanh") {
    Value x2 = b.mul(x, x);
    Value inner = b.mul(k(b, kSqrt2OverPi, x), b.add(x, b.mul(k(b, kGeluC, x), b.mul(x, x2))));
    Value th = b.unary("tanh", inner);
    Value left = b.mul(k(b, 0.5, x), x);
    Value right = b.add(k(b, 1, x), th);
    Value dinner = b.mul(k(b, kSqrt2OverPi, x), b.add(k(b, 1, x), b.mul(k(b, 3 * kGeluC, x), x2)));
    Value dright = b.mul(b.sub(k(b, 1, x), b.mul(th, th)), dinner);
    return b.mul(g, b.add(b.mul(k(b, 0.5, x), right), b.mul(left, dright)));
  }
  Value cdf = b.mul(k(b, 0.5, x), b.add(k(b, 1, x), erf(b, b.mul(x, k(b, kSqrt1_2, x)))));
  Value pdf = b.mul(k(b, kInvSqrt2Pi, x), b.unary("exponential", b.mul(k(b, -0.5, x), b.mul(x, x))));
  return b.mul(g, b.add(cdf, b.mul(x, pdf)));
}

// Unary activation: f(ctx, x in opmath) -> value.
LowerFn act(std::function<Value(Ctx&, Value)> f) {
  return [f](Ctx& c) -> std::vector<Value> {
    return {f(c, cast(c.b, c.tensor(0), float_opmath(c.dtype(0))))};
  };
}

// Backward with (grad_output, self, ...) as its first two arguments.
LowerFn act_grad(std::function<Value(Ctx&, Value, Value)> f) {
  return [f](Ctx& c) -> std::vector<Value> {
    ElemType t = float_opmath(c.dtype(1));
    auto [g, x] = align(c.b, c.tensor(0), c.tensor(1), t);
    return {f(c, g, x)};
  };
}

}  // namespace

void register_activations() {
  add("erf", act([](Ctx& c, Value x) { return erf(c.b, x); }));
  add("gelu", act([](Ctx& c, Value x) { return gelu(c.b, x, c.str_arg(1)); }));
  add("gelu_backward", act_grad([](Ctx& c, Value g, Value x) {
    return gelu_grad(c.b, g, x, c.str_arg(2));
  }));
  add("silu", act([](Ctx& c, Value x) { return c.b.mul(x, sigmoid(c.b, x)); }));
  add("mish", act([](Ctx& c, Value x) { return c.b.mul(x, c.b.unary("tanh", softplus1(c.b, x))); }));
  add("mish_backward", act_grad([](Ctx& c, Value g, Value x) {
    hlo::Builder& b = c.b;
    Value tsp = b.unary("tanh", softplus1(b, x));
    Value d = b.add(tsp, b.mul(b.mul(x, sigmoid(b, x)), b.sub(k(b, 1, x), b.mul(tsp, tsp))));
    return b.mul(g, d);
  }));
  // leaky_relu(self, negative_slope)
  add("leaky_relu", act([](Ctx& c, Value x) {
    Value s = scalar_bcast(c, 1, x.elem(), x.dims());
    return c.b.select(c.b.compare(x, zeros_like(c.b, x), Cmp::GT), x, c.b.mul(x, s));
  }));
  // leaky_relu_backward(grad_output, self, negative_slope, self_is_result)
  add("leaky_relu_backward", act_grad([](Ctx& c, Value g, Value x) {
    Value s = scalar_bcast(c, 2, x.elem(), x.dims());
    return c.b.select(c.b.compare(x, zeros_like(c.b, x), Cmp::GT), g, c.b.mul(g, s));
  }));
  // hardtanh(self, min_val, max_val)
  add("hardtanh", [](Ctx& c) -> std::vector<Value> {
    // Keeps integer dtypes (hardtanh is defined for them, as relu6 on ints).
    ElemType t = opmath(to_elem(c.dtype(0)));
    Value x = cast(c.b, c.tensor(0), t);
    return {c.b.clamp(c.scalar(1, t), x, c.scalar(2, t))};
  });
  // hardtanh_backward(grad_output, self, min_val, max_val)
  add("hardtanh_backward", act_grad([](Ctx& c, Value g, Value x) {
    hlo::Builder& b = c.b;
    Value lo = scalar_bcast(c, 2, x.elem(), x.dims()), hi = scalar_bcast(c, 3, x.elem(), x.dims());
    Value out = b.binary("or", b.compare(x, lo, Cmp::LE), b.compare(x, hi, Cmp::GE));
    return b.select(out, zeros_like(b, g), g);
  }));
  // elu(self, alpha, scale, input_scale)
  add("elu", act([](Ctx& c, Value x) {
    hlo::Builder& b = c.b;
    Value alpha = scalar_bcast(c, 1, x.elem(), x.dims()), scale = scalar_bcast(c, 2, x.elem(), x.dims()),
          in_scale = scalar_bcast(c, 3, x.elem(), x.dims());
    Value neg = b.mul(b.mul(alpha, scale), b.unary("exponential_minus_one", b.mul(x, in_scale)));
    return b.select(b.compare(x, zeros_like(b, x), Cmp::GT), b.mul(x, scale), neg);
  }));
  // elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
  add("elu_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = float_opmath(c.dtype(5));
    auto [g, x] = align(b, c.tensor(0), c.tensor(5), t);
    Value alpha = scalar_bcast(c, 1, t, x.dims()), scale = scalar_bcast(c, 2, t, x.dims()),
          in_scale = scalar_bcast(c, 3, t, x.dims());
    Value neg;
    if (c.bool_arg(4)) {  // x holds the result y: dy/dx = input_scale * (y + alpha * scale)
      neg = b.mul(b.mul(g, in_scale), b.add(x, b.mul(alpha, scale)));
    } else {
      neg = b.mul(b.mul(g, in_scale),
                  b.mul(b.mul(alpha, scale), b.unary("exponential", b.mul(x, in_scale))));
    }
    return {b.select(b.compare(x, zeros_like(b, x), Cmp::GT), b.mul(g, scale), neg)};
  });
  // softplus(self, beta, threshold)
  add("softplus", act([](Ctx& c, Value x) {
    hlo::Builder& b = c.b;
    Value beta = scalar_bcast(c, 1, x.elem(), x.dims()), th = scalar_bcast(c, 2, x.elem(), x.dims());
    Value bx = b.mul(x, beta);
    return b.select(b.compare(bx, th, Cmp::GT), x, b.div(softplus1(b, bx), beta));
  }));
  // softplus_backward(grad_output, self, beta, threshold)
  add("softplus_backward", act_grad([](Ctx& c, Value g, Value x) {
    hlo::Builder& b = c.b;
    Value beta = scalar_bcast(c, 2, x.elem(), x.dims()), th = scalar_bcast(c, 3, x.elem(), x.dims());
    Value bx = b.mul(x, beta);
    return b.select(b.compare(bx, th, Cmp::GT), g, b.mul(g, sigmoid(b, bx)));
  }));
  // log_sigmoid_forward(self) -> (output, buffer); the buffer is only a CPU
  // scratch for the backward, which recomputes from self here.
  add("log_sigmoid_forward", [](Ctx& c) -> std::vector<Value> {
    Value x = cast(c.b, c.tensor(0), float_opmath(c.dtype(0)));
    Value y = c.b.neg(softplus1(c.b, c.b.neg(x)));
    return {y, fit_meta(c, 1, zeros_like(c.b, x))};
  });
  // log_sigmoid_backward(grad_output, self, buffer)
  add("log_sigmoid_backward", act_grad([](Ctx& c, Value g, Value x) {
    return c.b.mul(g, sigmoid(c.b, c.b.neg(x)));
  }));
  // glu(self, dim): a * sigmoid(b) over the two halves of dim.
  add("glu", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = cast(b, c.tensor(0), float_opmath(c.dtype(0)));
    int64_t dim = wrap_dim(c.int_arg(1), x.rank()), h = x.dims()[dim] / 2;
    std::vector<int64_t> s0(x.rank(), 0), s1(x.rank(), 0), l0 = x.dims(), l1 = x.dims(), st(x.rank(), 1);
    l0[dim] = h;
    s1[dim] = h;
    return {b.mul(b.slice(x, s0, l0, st), sigmoid(b, b.slice(x, s1, l1, st)))};
  });
  // glu_backward(grad_output, self, dim)
  add("glu_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = float_opmath(c.dtype(1));
    Value g = cast(b, c.tensor(0), t), x = cast(b, c.tensor(1), t);
    int64_t dim = wrap_dim(c.int_arg(2), x.rank()), h = x.dims()[dim] / 2;
    std::vector<int64_t> s0(x.rank(), 0), s1(x.rank(), 0), l0 = x.dims(), l1 = x.dims(), st(x.rank(), 1);
    l0[dim] = h;
    s1[dim] = h;
    Value a = b.slice(x, s0, l0, st), sg = sigmoid(b, b.slice(x, s1, l1, st));
    Value ga = b.mul(g, sg);
    Value gb = b.mul(b.mul(ga, a), b.sub(k(b, 1, sg), sg));
    return {b.concatenate({ga, gb}, dim)};
  });
  // _prelu_kernel(self, weight): weight is already shaped to broadcast.
  add("_prelu_kernel", [](Ctx& c) -> std::vector<Value> {
    ElemType t = float_opmath(c.dtype(0));
    auto [x, w] = align(c.b, c.tensor(0), c.tensor(1), t);
    return {c.b.select(c.b.compare(x, zeros_like(c.b, x), Cmp::GT), x, c.b.mul(w, x))};
  });
  // _prelu_kernel_backward(grad_output, self, weight) -> (grad_input, grad_weight);
  // grad_weight is elementwise: autograd sums it to weight's shape.
  add("_prelu_kernel_backward", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    ElemType t = float_opmath(c.dtype(1));
    auto dims = hlo::broadcast_shapes(c.tensor(0).dims(),
                                      hlo::broadcast_shapes(c.tensor(1).dims(), c.tensor(2).dims()));
    Value g = bcast(b, cast(b, c.tensor(0), t), dims), x = bcast(b, cast(b, c.tensor(1), t), dims),
          w = bcast(b, cast(b, c.tensor(2), t), dims);
    Value pos = b.compare(x, zeros_like(b, x), Cmp::GT);
    return {b.select(pos, g, b.mul(w, g)), b.select(pos, zeros_like(b, g), b.mul(x, g))};
  });
  // clamp_min/clamp_max(self, Scalar) and their .Tensor forms; NaN propagates.
  for (int hi = 0; hi < 2; ++hi) {
    for (int tensor = 0; tensor < 2; ++tensor) {
      std::string name = std::string(hi ? "clamp_max" : "clamp_min") + (tensor ? ".Tensor" : "");
      add(name, [hi](Ctx& c) -> std::vector<Value> {
        ElemType t = opmath(to_elem(result_type(c, {0, 1})));
        Value x = cast(c.b, c.tensor(0), t);
        Value bound = c.arg(1).kind == Arg::kScalar ? c.scalar(1, t) : cast(c.b, c.tensor(1), t);
        auto [xa, ba] = align(c.b, x, bound, t);
        return {hi ? c.b.min(xa, ba) : c.b.max(xa, ba)};
      });
    }
  }
  // logit(self, eps?): log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given.
  add("logit", [](Ctx& c) -> std::vector<Value> {
    hlo::Builder& b = c.b;
    Value x = cast(b, c.tensor(0), float_opmath(c.dtype(0)));
    if (!c.is_none(1)) {
      Value eps = c.scalar(1, x.elem());
      x = b.clamp(eps, x, b.sub(b.constant_f(1, x.elem()), eps));
    }
    return {b.unary("log", b.div(x, b.sub(k(b, 1, x), x)))};
  });
  // logit_backward(grad_output, self, eps?): zero outside [eps, 1 - eps].
  add("logit_backward", act_grad([](Ctx& c, Value g, Value x) {
    hlo::Builder& b = c.b;
    Value d = b.div(g, b.mul(x, b.sub(k(b, 1, x), x)));
    if (c.is_none(2)) return d;
    Value eps = scalar_bcast(c, 2, x.elem(), x.dims());
    Value out = b.binary("or", b.compare(x, eps, Cmp::LT), b.compare(x, b.sub(k(b, 1, x), eps), Cmp::GT));
    return b.select(out, zeros_like(b, d), d);
  }));
  // sgn: sign for real dtypes (l1_loss's backward); z / |z| (0 at 0) for
  // complex ones (abs's backward, e.g. of |fft(x)|).
  add("sgn", [](Ctx& c) -> std::vector<Value> {
    Value x = c.tensor(0);
    hlo::Builder& b = c.b;
    if (hlo::is_complex(x.elem())) {
      Value mag = b.unary("abs", x);
      Value zero = b.compare(mag, zeros_like(b, mag), Cmp::EQ);
      Value safe = b.select(zero, k(b, 1, mag), mag);
      Value q = b.div(x, b.generic("complex", {safe, zeros_like(b, safe)}, "", x.type));
      return {b.select(zero, zeros_like(b, x), q)};
    }
    if (x.elem() == ElemType::PRED) return {x};
    return {c.b.unary("sign", cast(c.b, x, opmath(x.elem())))};
  });
  add("hardsigmoid", act([](Ctx& c, Value x) {
    hlo::Builder& b = c.b;
    return b.clamp(b.constant_f(0, x.elem()), b.add(b.mul(x, k(b, 1.0 / 6, x)), k(b, 0.5, x)),
                   b.constant_f(1, x.elem()));
  }));
  add("hardsigmoid_backward", act_grad([](Ctx& c, Value g, Value x) {
    hlo::Builder& b = c.b;
    Value in = b.binary("and", b.compare(x, k(b, -3, x), Cmp::GT), b.compare(x, k(b, 3, x), Cmp::LT));
    return b.select(in, b.mul(g, k(b, 1.0 / 6, g)), zeros_like(b, g));
  }));
  add("hardswish", act([](Ctx& c, Value x) {
    hlo::Builder& b = c.b;
    Value r6 = b.clamp(b.constant_f(0, x.elem()), b.add(x, k(b, 3, x)), b.constant_f(6, x.elem()));
    return b.mul(x, b.div(r6, k(b, 6, x)));
  }));
  add("hardswish_backward", act_grad([](Ctx& c, Value g, Value x) {
    hlo::Builder& b = c.b;
    Value mid = b.mul(g, b.add(b.div(x, k(b, 3, x)), k(b, 0.5, x)));
    // PyTorch's CPU kernel uses the open interval (-3, 3) for the middle piece.
    return b.select(b.compare(x, k(b, -3, x), Cmp::LE), zeros_like(b, g),
                    b.select(b.compare(x, k(b, 3, x), Cmp::LT), mid, g));
  }));
}

}  // namespace tpu::lower

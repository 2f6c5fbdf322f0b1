// The fused LSTM and GRU cells (ATen's RNN.cpp sends lstm_cell / gru_cell, and
// so nn.LSTM / nn.GRU, to them on a PrivateUse1 device, as on CUDA) and their
// backward kernels. Gate math as in ATen's CUDA kernels, in opmath per element;
// the workspace saved for backward holds what those kernels save: the
// activated LSTM gates [i, f, g, o], and for the GRU [r, z, n, hx, hn + b_hn].
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

Value sigmoid(hlo::Builder& b, Value x) { return b.unary("logistic", x); }
Value one_minus(hlo::Builder& b, Value x) { return b.sub(scalar_like(b, 1, x), x); }

// Chunk k of n along dim 1 of a [B, n*H] value.
Value chunk(hlo::Builder& b, Value x, int64_t k, int64_t n) {
  int64_t rows = x.dims()[0], h = x.dims()[1] / n;
  return b.slice(x, {0, k * h}, {rows, (k + 1) * h}, {1, 1});
}

// gates [B, n*H] in t, plus an optional [n*H] bias broadcast over the batch.
Value plus_bias(Ctx& c, Value gates, size_t bias_arg, ElemType t) {
  auto bias = c.opt_tensor(bias_arg);
  if (!bias) return gates;
  return c.b.add(gates, c.b.broadcast_in_dim(cast(c.b, *bias, t), gates.dims(), {1}));
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?)
//   -> (hy, cy, workspace)
std::vector<Value> lstm_cell(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType st = to_elem(c.dtype(0)), t = opmath(st);
  Value gates = b.add(cast(b, c.tensor(0), t), cast(b, c.tensor(1), t));
  gates = plus_bias(c, plus_bias(c, gates, 3, t), 4, t);
  Value i = sigmoid(b, chunk(b, gates, 0, 4)), f = sigmoid(b, chunk(b, gates, 1, 4));
  Value g = b.unary("tanh", chunk(b, gates, 2, 4)), o = sigmoid(b, chunk(b, gates, 3, 4));
  Value cx = cast(b, c.tensor(2), t);
  Value cy = b.add(b.mul(f, cx), b.mul(i, g));
  Value hy = b.mul(o, b.unary("tanh", cy));
  return {cast(b, hy, st), cast(b, cy, st), cast(b, b.concatenate({i, f, g, o}, 1), st)};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias)
std::vector<Value> lstm_cell_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType st = to_elem(c.dtype(2)), t = opmath(st);
  Value cx = cast(b, c.tensor(2), t), cy = cast(b, c.tensor(3), t);
  Value ws = cast(b, c.tensor(4), t);
  Value i = chunk(b, ws, 0, 4), f = chunk(b, ws, 1, 4), g = chunk(b, ws, 2, 4), o = chunk(b, ws, 3, 4);
  auto ghy = c.opt_tensor(0), gcy = c.opt_tensor(1);
  Value zero = zeros_like(b, cy);
  Value grad_hy = ghy ? cast(b, *ghy, t) : zero, grad_cy = gcy ? cast(b, *gcy, t) : zero;
  Value tcy = b.unary("tanh", cy);
  Value go = b.mul(grad_hy, tcy);
  Value gc = b.add(b.mul(b.mul(grad_hy, o), one_minus(b, b.mul(tcy, tcy))), grad_cy);
  Value gi = b.mul(b.mul(gc, g), b.mul(one_minus(b, i), i));
  Value gf = b.mul(b.mul(gc, cx), b.mul(one_minus(b, f), f));
  Value gg = b.mul(b.mul(gc, i), one_minus(b, b.mul(g, g)));
  go = b.mul(go, b.mul(one_minus(b, o), o));
  Value grad_gates = b.concatenate({gi, gf, gg, go}, 1);
  Value grad_cx = b.mul(gc, f);
  // Without a bias PyTorch leaves the third result undefined (its meta kernel says
  // so, and the program then skips it).
  Value grad_bias = reduce_sum(b, grad_gates, {0}, false);
  return {cast(b, grad_gates, st), cast(b, grad_cx, st), cast(b, grad_bias, st)};
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?)
//   -> (hy, workspace)
std::vector<Value> gru_cell(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType st = to_elem(c.dtype(0)), t = opmath(st);
  Value ig = plus_bias(c, cast(b, c.tensor(0), t), 3, t);
  Value hg = plus_bias(c, cast(b, c.tensor(1), t), 4, t);
  Value hx = cast(b, c.tensor(2), t);
  Value r = sigmoid(b, b.add(chunk(b, ig, 0, 3), chunk(b, hg, 0, 3)));
  Value z = sigmoid(b, b.add(chunk(b, ig, 1, 3), chunk(b, hg, 1, 3)));
  Value hn = chunk(b, hg, 2, 3);
  Value n = b.unary("tanh", b.add(chunk(b, ig, 2, 3), b.mul(r, hn)));
  Value hy = b.add(n, b.mul(z, b.sub(hx, n)));
  return {cast(b, hy, st), cast(b, b.concatenate({r, z, n, hx, hn}, 1), st)};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::vector<Value> gru_cell_backward(Ctx& c) {
  hlo::Builder& b = c.b;
  ElemType st = to_elem(c.dtype(0)), t = opmath(st);
  Value gy = cast(b, c.tensor(0), t), ws = cast(b, c.tensor(1), t);
  Value r = chunk(b, ws, 0, 5), z = chunk(b, ws, 1, 5), n = chunk(b, ws, 2, 5);
  Value hx = chunk(b, ws, 3, 5), hn = chunk(b, ws, 4, 5);
  Value gz = b.mul(b.mul(gy, b.sub(hx, n)), b.mul(one_minus(b, z), z));
  Value ghx = b.mul(gy, z);
  Value gn = b.mul(b.mul(gy, one_minus(b, z)), one_minus(b, b.mul(n, n)));
  Value ghn = b.mul(gn, r);
  Value gr = b.mul(b.mul(gn, hn), b.mul(one_minus(b, r), r));
  Value gi_all = b.concatenate({gr, gz, gn}, 1);
  Value gh_all = b.concatenate({gr, gz, ghn}, 1);
  // Bias gradients are computed either way; without biases nobody reads them.
  return {cast(b, gi_all, st), cast(b, gh_all, st), cast(b, ghx, st),
          cast(b, reduce_sum(b, gi_all, {0}, false), st),
          cast(b, reduce_sum(b, gh_all, {0}, false), st)};
}

}  // namespace

void register_rnn_cells() {
  add("_thnn_fused_lstm_cell", lstm_cell);
  // PyTorch 2.13's Python meta kernel reads input_bias.device even when the
  // biases are None (nn.LSTM(bias=False)); the lowering's own shapes serve.
  skip_meta("_thnn_fused_lstm_cell");
  add("_thnn_fused_lstm_cell_backward_impl", lstm_cell_backward);
  add("_thnn_fused_gru_cell", gru_cell);
  add("_thnn_fused_gru_cell_backward", gru_cell_backward);
}

}  // namespace tpu::lower

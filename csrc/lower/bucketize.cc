// bucketize: the bucket of each input element among sorted 1-D boundaries (Idefics2/3
// and SmolVLM's vision embeddings bucket patch positions with it).
// PyTorch's CPU kernel binary-searches the boundaries; for sorted boundaries the index it
// finds is the number of boundaries its search predicate holds for, which is what this
// lowering counts (a compare against every boundary and a sum: no search, no
// data-dependent control flow):
//   right=False: #{ j : !(boundaries[j] >= x) }   (lower bound)
//   right=True:  #{ j : !(boundaries[j] >  x) }   (upper bound)
// Written with the negation as the CPU's loop is, a NaN input lands past the last
// boundary as it does there. Comparisons run in the promoted type of input and
// boundaries; the result is int64, or int32 with out_int32.
#include "lower/helpers.h"

namespace tpu::lower {

namespace {

using hlo::Cmp;

Value count_buckets(hlo::Builder& b, Value x, Value bounds, ElemType t, bool right, bool int32) {
  x = cast(b, x, t);
  bounds = cast(b, bounds, t);
  std::vector<int64_t> dims = x.dims();
  int64_t m = bounds.dims().empty() ? 1 : bounds.dims()[0];
  bounds = b.reshape(bounds, {m});
  std::vector<int64_t> full = dims;
  full.push_back(m);
  std::vector<int64_t> x_map(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) x_map[i] = static_cast<int64_t>(i);
  Value xb = b.broadcast_in_dim(x, full, x_map);
  Value bb = b.broadcast_in_dim(bounds, full, {static_cast<int64_t>(dims.size())});
  Value holds = b.compare(bb, xb, right ? Cmp::GT : Cmp::GE);
  Value below = b.compare(holds, b.splat_i(0, holds.type), Cmp::EQ);  // the negation: NaN-safe
  ElemType out = int32 ? ElemType::S32 : ElemType::S64;
  return reduce_sum(b, b.convert(below, out), {static_cast<int64_t>(dims.size())}, false);
}

// bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False)
std::vector<Value> bucketize_tensor(Ctx& c) {
  TORCH_CHECK(c.tensor(1).dims().size() == 1,
              "boundaries tensor must be 1 dimension, but got dim(", c.tensor(1).dims().size(), ")");
  ElemType t = to_elem(result_type(c, {0, 1}));
  return {count_buckets(c.b, c.tensor(0), c.tensor(1), t, c.bool_arg(3), c.bool_arg(2))};
}

// bucketize.Scalar(Scalar self, Tensor boundaries, *, bool out_int32=False, bool right=False)
std::vector<Value> bucketize_scalar(Ctx& c) {
  TORCH_CHECK(c.tensor(1).dims().size() == 1,
              "boundaries tensor must be 1 dimension, but got dim(", c.tensor(1).dims().size(), ")");
  ElemType t = to_elem(result_type(c, {0, 1}));
  return {count_buckets(c.b, c.scalar(0, t), c.tensor(1), t, c.bool_arg(3), c.bool_arg(2))};
}

}  // namespace

void register_bucketize() {
  add("bucketize.Tensor", bucketize_tensor);
  add("bucketize.Scalar", bucketize_scalar);
}

}  // namespace tpu::lower

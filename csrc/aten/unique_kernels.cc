// unique_consecutive (and unique_dim_consecutive) on the device: the number of groups
// decides the result's shape, so, as on CUDA, the op synchronises once to read that one
// number; everything else (group boundaries, first element of each group, inverse
// indices, counts) is computed on the device by lowered ops.
// Transformers' encoder-decoder sequence-classification heads (BART, mBART, PLBart,
// LED, BigBird-Pegasus, MVP...) call it on every forward to check their <eos> counts.
//   boundary[i] = i == 0 || x[i] != x[i-1]   (NaN is never equal: its own group, as on the CPU)
//   group[i]    = cumsum(boundary)[i] - 1    (the inverse indices)
//   first[g]    = min { i : group[i] == g }  (the output takes each group's first element,
//                                             so -0.0 / 0.0 groups keep the CPU's sign)
//   counts[g]   = #{ i : group[i] == g }
// With a dim, x[i] is the i-th slice along dim and slices differ where any element does.
// _unique2 (torch.unique without a dim; ViLT's visual embedding) is the same grouping of
// the stably sorted flat input; the inverse indices are scattered back through the sort's
// permutation. Its output is sorted whether or not `sorted` is asked for, as on CUDA
// (unsorted order is unspecified; the CPU's hash-based unsorted order is not reproduced).
#include <ATen/ATen.h>
#include <torch/library.h>

#include "aten/kernels.h"

namespace tpu::aten {

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// rows: [n, k] view of the input, one row per element (or slice) to group.
// Returns (first index of each group, group of each row, count of each group or empty).
std::tuple<at::Tensor, at::Tensor, at::Tensor> group_rows(const at::Tensor& rows,
                                                          bool return_counts) {
  int64_t n = rows.size(0);
  auto long_opts = rows.options().dtype(at::kLong);
  at::Tensor change = at::ne(rows.slice(0, 1, n), rows.slice(0, 0, n - 1)).any(1);
  at::Tensor boundary = at::cat({at::ones({1}, rows.options().dtype(at::kBool)), change});
  at::Tensor group = at::cumsum(boundary, 0, at::kLong).sub_(1);
  int64_t groups = group[n - 1].item<int64_t>() + 1;  // the one host read
  at::Tensor first = at::full({groups}, n, long_opts)
                         .scatter_reduce(0, group, at::arange(n, long_opts), "amin");
  at::Tensor counts = return_counts
                          ? at::zeros({groups}, long_opts).scatter_add_(0, group, at::ones({n}, long_opts))
                          : at::empty({0}, long_opts);
  return {first, group, counts};
}

Triple unique_consecutive_kernel(const at::Tensor& self, bool return_inverse, bool return_counts,
                                 std::optional<int64_t> dim) {
  auto long_opts = self.options().dtype(at::kLong);
  if (dim.has_value()) {
    TORCH_CHECK(self.dim() > 0, "unique_consecutive: a dim needs a tensor with at least one dimension");
    int64_t d = at::maybe_wrap_dim(*dim, self.dim());
    int64_t n = self.size(d);
    if (n == 0) return {self.clone(), at::empty({0}, long_opts), at::empty({0}, long_opts)};
    at::Tensor rows = self.movedim(d, 0).reshape({n, self.numel() / n});
    auto [first, group, counts] = group_rows(rows, return_counts);
    return {self.index_select(d, first), return_inverse ? group : at::empty({0}, long_opts), counts};
  }
  int64_t n = self.numel();
  if (n == 0) {
    return {at::empty({0}, self.options()),
            return_inverse ? at::empty(self.sizes(), long_opts) : at::empty({0}, long_opts),
            at::empty({0}, long_opts)};
  }
  at::Tensor flat = self.reshape({n, 1});
  auto [first, group, counts] = group_rows(flat, return_counts);
  return {self.reshape({n}).index_select(0, first),
          return_inverse ? group.reshape(self.sizes()) : at::empty({0}, long_opts), counts};
}

Triple unique_dim_consecutive_kernel(const at::Tensor& self, int64_t dim, bool return_inverse,
                                     bool return_counts) {
  return unique_consecutive_kernel(self, return_inverse, return_counts, dim);
}

Triple unique2_kernel(const at::Tensor& self, bool /*sorted*/, bool return_inverse,
                      bool return_counts) {
  TORCH_CHECK(!self.is_complex(), "unique: complex tensors are not supported (", self.scalar_type(),
              ")");
  auto long_opts = self.options().dtype(at::kLong);
  int64_t n = self.numel();
  if (n == 0) {
    return {at::empty({0}, self.options()),
            return_inverse ? at::empty(self.sizes(), long_opts) : at::empty({0}, long_opts),
            at::empty({0}, long_opts)};
  }
  auto [values, perm] = self.reshape({n}).sort(/*stable=*/true, 0, /*descending=*/false);
  auto [first, group, counts] = group_rows(values.reshape({n, 1}), return_counts);
  at::Tensor inverse = return_inverse
                           ? at::empty({n}, long_opts).scatter_(0, perm, group).reshape(self.sizes())
                           : at::empty({0}, long_opts);
  return {values.index_select(0, first), inverse, counts};
}

}  // namespace

void register_unique_kernels(torch::Library& m) {
  m.impl("unique_consecutive", TORCH_FN(unique_consecutive_kernel));
  m.impl("unique_dim_consecutive", TORCH_FN(unique_dim_consecutive_kernel));
  m.impl("_unique2", TORCH_FN(unique2_kernel));
}

}  // namespace tpu::aten

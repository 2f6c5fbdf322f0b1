// Ops that rearrange data: cat, index_select, stack-like helpers.
#include "lower/helpers.h"

namespace tpu::lower {

void register_shape_ops() {
  add("cat", [](Ctx& c) -> std::vector<Value> {
    std::vector<Value> parts;
    auto ts = c.tensors(0);
    const auto& dtypes = c.arg(0).dtypes;
    c10::ScalarType out = c10::ScalarType::Undefined;
    for (auto d : dtypes) out = out == c10::ScalarType::Undefined ? d : c10::promoteTypes(out, d);
    if (!c.out_meta().empty()) out = c.out_dtype(0);
    int64_t rank = 0;
    for (const auto& v : ts) rank = std::max(rank, v.rank());
    int64_t dim = 0;
    for (const auto& v : ts) {
      // Legacy rule: 1-D empty tensors are skipped whatever their shape.
      if (v.rank() == 1 && v.dims()[0] == 0 && rank > 1) continue;
      parts.push_back(cast(c.b, v, to_elem(out)));
    }
    if (parts.empty()) return {cast(c.b, ts[0], to_elem(out))};
    dim = wrap_dim(c.int_arg(1), parts[0].rank());
    if (parts.size() == 1) return {parts[0]};
    return {c.b.concatenate(parts, dim)};
  });
  add("index_select", [](Ctx& c) -> std::vector<Value> {
    Value self = c.tensor(0);
    int64_t dim = wrap_dim(c.int_arg(1), self.rank());
    Value idx = cast(c.b, c.b.reshape(c.tensor(2), {c.tensor(2).type.numel()}), ElemType::S64);
    int64_t n = idx.dims()[0];
    c.check_index(idx, self.rank() == 0 ? 1 : self.dims()[dim], false,
                  {CheckSpec::kIndexError, "index out of range in self (index {} on dimension " +
                                               std::to_string(dim) + " of size " +
                                               std::to_string(self.rank() == 0 ? 1 : self.dims()[dim]) + ")"});
    if (self.rank() == 0) return {self};
    hlo::Builder::GatherDims d;
    std::vector<int64_t> slice = self.dims();
    slice[dim] = 1;
    for (int64_t k = 0; k < self.rank(); ++k)
      if (k != dim) d.offset_dims.push_back(k);
    d.collapsed_slice_dims = {dim};
    d.start_index_map = {dim};
    d.index_vector_dim = 1;
    std::vector<int64_t> out = self.dims();
    out[dim] = n;
    Value g = c.b.gather(self, c.b.reshape(idx, {n, 1}), d, slice, {self.elem(), out});
    return {g};
  });
}

}  // namespace tpu::lower

// Reading and writing strided views of a storage inside a program.
//
// A storage enters a program as a rank-1 array (its Slot buffer). A tensor is a
// view of it: sizes, strides and an element offset. Reading a view emits
// slice/reshape/transpose/broadcast where the strides allow and a gather where
// they do not; writing emits a whole replacement, a dynamic_update_slice for a
// contiguous range (also for a dense view in another dimension order, transposed
// to memory order first), or a scatter. Torch-free: layouts are plain vectors.
#pragma once

#include <cstdint>
#include <vector>

#include "hlo/builder.h"

namespace tpu::engine {

struct ViewLayout {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  int64_t numel() const;
  bool is_contiguous() const;  // row-major dense (size-1 dims ignored)
};

// True when the view is the whole storage, densely, from element 0.
bool covers_whole(const ViewLayout& v, int64_t length);

// The dimension order, outermost first, in which `strides` lay `sizes` out densely
// (a permutation of a row-major layout, as an op's result on transposed or
// channels-last inputs has); false when they are not such a layout.
bool dense_order(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                 std::vector<int64_t>* order);
// dense_order, and not row-major (size-1 dimensions aside): the layouts a new
// result keeps instead of being made contiguous.
bool permuted_dense_order(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                          std::vector<int64_t>* order);

// The view's elements as a dense value of shape v.sizes.
hlo::Value read_view(hlo::Builder& b, hlo::Value base, const ViewLayout& v);

// `base` with the view's elements replaced by `value` (shape v.sizes, same
// element type as base).
hlo::Value write_view(hlo::Builder& b, hlo::Value base, const ViewLayout& v, hlo::Value value);

}  // namespace tpu::engine

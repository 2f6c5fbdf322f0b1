// Host-built interpolation matrices shared by the upsample lowerings (resize.cc's
// 2-d kernels, upsample_linear1d.cc, upsample_bicubic2d.cc): a constant [out, in] matrix per axis from
// PyTorch's source-index rules, so that resizing is a matmul.
#pragma once

#include <optional>

#include "lower/helpers.h"

namespace tpu::lower {

// An optional float argument (an upsample's scale factor): None -> nullopt.
std::optional<double> opt_double(const Ctx& c, size_t i);

// PyTorch's area_pixel_compute_scale (float arithmetic, as its CPU kernels).
float pixel_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale);

// The linear (bilinear per axis) interpolation matrix [out, in] in type t, as
// PyTorch's CPU kernels compute source indices and weights (in float).
Value linear_matrix(hlo::Builder& b, int64_t in, int64_t out, bool align_corners,
                    std::optional<double> scale, ElemType t);

}  // namespace tpu::lower

// Draws from the device Philox generator shared by the random-op lowerings
// (random.cc, distributions.cc). Each call consumes numbers from the op's one
// rng state: an op must draw everything it needs in a single call, since two
// draws from the same state return the same bits.
#pragma once

#include <vector>

#include "lower/helpers.h"

namespace tpu::lower {

// Uniform floats in [0, 1) of opmath(t) (f64 uses 64-bit draws, others 32-bit).
Value uniform01(Ctx& c, const std::vector<int64_t>& dims, ElemType t);

// Standard normal samples of opmath(t) (Box-Muller on one draw of 2x the size).
Value standard_normal(Ctx& c, const std::vector<int64_t>& dims, ElemType t);

}  // namespace tpu::lower

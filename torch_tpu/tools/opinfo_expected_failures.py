"""Expected failures of the OpInfo differential check, each with its reason.

Keys: (OpInfo name, dtype name, grad) -> reason. Nothing else is skipped: an op
that fails and is not listed here fails the check.
"""

_HARNESS_DEVICE = ("the differential harness moves every tensor argument to tpu; this op "
                   "requires that argument on the CPU (as CUDA does), so the tpu call is rejected")
_GRID_BF16 = ("PyTorch's CPU grid sampler does its coordinate and weight arithmetic in bfloat16 "
              "(errors up to 0.2 against a float64 reference on the samples); the tpu lowering "
              "computes in float32 opmath (error under 0.004), so they differ by the reference's error")
_GRID_BICUBIC_GRAD = ("bicubic grid gradient sums 16 taps x channels in float32; CPU and tpu both "
                      "differ from a float64 reference by ~8e-5 (above atol 1e-5) in different "
                      "summation orders, so they cannot agree to 1e-5 on near-zero gradients")

EXPECTED = {
    ("tensor_split", "float32", False): _HARNESS_DEVICE + " (tensor_indices_or_sections)",
    ("to", "float32", False): "the samples convert to an explicit CPU device/tensor, which the "
                              "harness cannot retarget; the result is rightly on the CPU",
    ("chalf", "float32", False): "complex32 (ComplexHalf) has no XLA element type; the tpu device "
                                 "rejects the dtype with a TypeError",
    ("sparse.sampled_addmm", "float32", False): "sparse tensors are not supported on tpu",
    ("sparse.mm", "float32", False): "sparse tensors are not supported on tpu",
    ("nn.functional.grid_sample", "bfloat16", False): _GRID_BF16,
    ("grid_sampler_2d", "bfloat16", False): _GRID_BF16,
    ("grid_sampler_2d", "float32", True): _GRID_BICUBIC_GRAD,
}


def reason(name, dtype_name, grad):
    return EXPECTED.get((name, dtype_name, grad))

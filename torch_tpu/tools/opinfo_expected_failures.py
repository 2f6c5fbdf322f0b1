"""Expected failures of the OpInfo differential check, each with its reason.

Keys: (OpInfo name, dtype name, grad) -> reason. Nothing else is skipped: an op
that fails and is not listed here fails the check.
"""

_HARNESS_DEVICE = ("the differential harness moves every tensor argument to tpu; this op "
                   "requires that argument on the CPU (as CUDA does), so the tpu call is rejected")

EXPECTED = {
    ("tensor_split", "float32", False): _HARNESS_DEVICE + " (tensor_indices_or_sections)",
    ("to", "float32", False): "the samples convert to an explicit CPU device/tensor, which the "
                              "harness cannot retarget; the result is rightly on the CPU",
    ("chalf", "float32", False): "complex32 (ComplexHalf) has no XLA element type; the tpu device "
                                 "rejects the dtype with a TypeError",
    ("sparse.sampled_addmm", "float32", False): "sparse tensors are not supported on tpu",
    ("sparse.mm", "float32", False): "sparse tensors are not supported on tpu",
}


def reason(name, dtype_name, grad):
    return EXPECTED.get((name, dtype_name, grad))

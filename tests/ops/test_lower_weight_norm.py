"""The fused weight norm, _weight_norm_interface and its backward (csrc/lower/weight_norm.cc),
against PyTorch CPU in both execution modes, with nothing falling back to the CPU."""
import pytest
import torch

from lower_check import check


@pytest.mark.parametrize("dim", [0, 2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_weight_norm_interface(dim, dtype):
    v = torch.randn(6, 4, 5).to(dtype)
    shape = [1, 1, 1]
    shape[dim] = v.shape[dim]
    g = torch.randn(shape).to(dtype)
    tol = {} if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    check(lambda a, b: torch._weight_norm_interface(a, b, dim), v, g, grad=True, **tol)


def test_weight_norm_composite_and_parametrization():
    """torch._weight_norm (what nn.utils.parametrizations.weight_norm calls), forward and backward."""
    check(lambda a, b: torch._weight_norm(a, b, 0), torch.randn(8, 3), torch.randn(8, 1), grad=True)

    def conv(x, v, g):  # wav2vec2's positional convolution: weight norm over the kernel dim
        return torch.nn.functional.conv1d(x, torch._weight_norm(v, g, 2), padding=2, groups=2)
    check(conv, torch.randn(2, 4, 10), torch.randn(4, 2, 5), torch.randn(1, 1, 5), grad=True)


@pytest.mark.parametrize("dim", [1, -1])
def test_weight_norm_rejects_other_dims_as_the_cpu(dim):
    """Only the first or last dim, given as 0 or rank - 1 (the CPU kernel refuses -1 too)."""
    v = torch.randn(3, 4, 5, device="tpu")
    with pytest.raises(RuntimeError, match="first or last dim"):
        torch._weight_norm_interface(v, torch.randn(1, 4, 1, device="tpu"), dim)

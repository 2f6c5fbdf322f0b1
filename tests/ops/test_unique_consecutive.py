"""unique_consecutive / unique_dim_consecutive on tpu (csrc/aten/unique_kernels.cc) against
PyTorch CPU, in both execution modes, with nothing falling back to the CPU."""
import pytest
import torch

from lower_check import check


def _uc(**kw):
    return lambda a: torch.unique_consecutive(a, **kw)


@pytest.mark.parametrize("kw", [{}, {"return_inverse": True}, {"return_counts": True},
                                {"return_inverse": True, "return_counts": True}])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.bool])
def test_unique_consecutive_flat(kw, dtype):
    x = torch.tensor([[1, 1, 2, 2, 2], [0, 0, 1, 3, 3]]).to(dtype)
    check(_uc(**kw), x, grad=False)


def test_unique_consecutive_float_edge_values():
    """NaN is never equal to its neighbour; -0.0 and 0.0 are one group that keeps the first sign."""
    x = torch.tensor([float("nan"), float("nan"), -0.0, 0.0, 1.5, 1.5, float("inf")])
    out = check(_uc(return_inverse=True, return_counts=True), x, grad=False, equal_nan=True)
    assert torch.signbit(out[0].cpu()[2])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_unique_consecutive_dim(dim):
    x = torch.tensor([[1, 1, 2, 2], [1, 1, 2, 3], [1, 1, 2, 3], [0, 0, 0, 0]])
    check(_uc(dim=dim, return_inverse=True, return_counts=True), x, grad=False)
    check(lambda a: torch.unique_consecutive(a, dim=dim), x.float(), grad=False)


def test_unique_consecutive_scalar_and_empty():
    check(_uc(return_inverse=True, return_counts=True), torch.tensor(5.0), grad=False)
    check(_uc(return_inverse=True, return_counts=True), torch.tensor([]), grad=False)
    check(_uc(return_counts=True), torch.randint(0, 3, (64,)), grad=False)


def test_bart_style_eos_check():
    """BartForSequenceClassification: every row must hold the same number of <eos>."""
    ids = torch.tensor([[5, 7, 2], [9, 4, 2]])
    check(lambda a: torch.unique_consecutive((a == 2).sum(1)), ids, grad=False)

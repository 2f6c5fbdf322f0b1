"""Selection / scan lowerings (csrc/lower/selection.cc) against PyTorch CPU."""
import pytest
import torch

from lower_check import check

torch.manual_seed(0)
X = torch.randn(4, 6, 5)


@pytest.mark.parametrize("dim", [None, 0, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_argmin(dim, keepdim):
    check(lambda x: (x.argmax(dim, keepdim), x.argmin(dim, keepdim)), X, grad=False)


def test_arg_ties_nan_and_int():
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, float("nan"), 5.0, float("nan")], [-1.0, -1.0, -1.0, -1.0]])
    check(lambda x: (x.argmax(1), x.argmin(1), x.argmax()), x, grad=False)
    i = torch.randint(-5, 5, (3, 7))
    check(lambda i: (i.argmax(1), i.max(1), i.min(0)), i, grad=False)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_max_min_dim(dim):
    check(lambda x: (x.max(dim), x.min(dim, keepdim=True)), X)


@pytest.mark.parametrize("dim", [0, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort(dim, descending):
    check(lambda x: torch.sort(x, dim=dim, descending=descending), X)
    ties = torch.tensor([[2, 1, 2, 1, 0, 2], [3, 3, 3, 1, 1, 1]])
    check(lambda t: torch.sort(t, dim=-1, descending=descending, stable=True), ties, grad=False)
    nan = torch.tensor([1.0, float("nan"), -2.0, 0.5])
    check(lambda t: torch.sort(t, descending=descending), nan, grad=False, equal_nan=True)


@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest):
    check(lambda x: torch.topk(x, 3, dim=1, largest=largest), X)
    check(lambda x: torch.topk(x, 2, largest=largest), X.transpose(0, 2))


@pytest.mark.parametrize("dim", [0, -1])
def test_cumsum_cumprod(dim):
    check(lambda x: (torch.cumsum(x, dim), torch.cumprod(x, dim)), X, atol=1e-5)
    i = torch.randint(-3, 4, (3, 5), dtype=torch.int32)
    check(lambda i: (torch.cumsum(i, dim), torch.cumsum(i, dim, dtype=torch.float32)), i, grad=False)


def test_logsumexp():
    check(lambda x: torch.logsumexp(x, dim=1), X, atol=1e-5)
    check(lambda x: torch.logsumexp(x, dim=(0, 2), keepdim=True), X, atol=1e-5)
    inf = torch.tensor([[float("-inf"), float("-inf")], [1.0, float("-inf")]])
    check(lambda x: torch.logsumexp(x, dim=1), inf, grad=False)


def test_all_any_and_inf_tests():
    b = X > 0
    check(lambda b: (b.all(), b.any(), b.all(1), b.any(-1, keepdim=True), b.all(dim=(0, 2))), b, grad=False)
    u = torch.tensor([[0, 2], [1, 1]], dtype=torch.uint8)
    check(lambda u: (u.all(), u.any(0)), u, grad=False)
    s = torch.tensor([1.0, float("inf"), float("-inf"), float("nan")])
    check(lambda s: (torch.isinf(s), torch.isneginf(s), torch.isposinf(s), torch.isnan(s)), s, grad=False)


def test_kthvalue_median():
    x = torch.randn(4, 7, 3)
    check(lambda x: (x.kthvalue(3, 1), x.kthvalue(1, -1, keepdim=True)), x)
    check(lambda x: (x.median(1), x.median(-1, keepdim=True)), x)
    check(lambda x: x.median(0), torch.randn(6, 2))  # even count: the lower median

"""Moment and norm lowerings (csrc/lower/statistics.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)
X = torch.randn(3, 4, 5) * 2 + 1


@pytest.mark.parametrize("dim,correction,keepdim", [(None, 1, False), (1, 0, True), ((0, 2), 1, False),
                                                    (-1, 2, False)])
def test_var_std(dim, correction, keepdim):
    check(lambda x: (torch.var(x, dim, correction=correction, keepdim=keepdim),
                     torch.std(x, dim, correction=correction, keepdim=keepdim),
                     *torch.var_mean(x, dim, correction=correction, keepdim=keepdim),
                     *torch.std_mean(x, dim, correction=correction, keepdim=keepdim)), X, atol=1e-5)


@pytest.mark.parametrize("ord", [2, 1, float("inf"), -float("inf"), 3, 0])
def test_vector_norm(ord):
    check(lambda x: torch.linalg.vector_norm(x, ord, dim=-1), X, grad=ord != 0, atol=1e-5)
    check(lambda x: torch.linalg.vector_norm(x, ord), X, grad=False, atol=1e-5)


def test_normalize_and_cosine_similarity():
    check(lambda x: F.normalize(x, dim=-1), X, atol=1e-5)
    check(lambda x, y: F.cosine_similarity(x, y, dim=1), X, X.flip(0), atol=1e-5)
    check(lambda x: x.norm(dim=(1, 2)), X, atol=1e-5)


def test_max_min_reductions_propagate_nan():
    # XLA:CPU's maximum/minimum skip NaN; PyTorch's reductions return it.
    x = torch.tensor([[1.0, float("nan"), -2.0], [3.0, 4.0, 5.0]])
    check(lambda t: (t.amax(1), t.amin(1), t.amax(), t.max(), t.min(), t[1].max(),
                     torch.linalg.vector_norm(t, float("inf"), dim=1),
                     torch.linalg.vector_norm(t, -float("inf"), dim=1)), x, grad=False, equal_nan=True)

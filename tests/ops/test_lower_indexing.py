"""Indexing lowerings (csrc/lower/indexing.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)
X = torch.randn(4, 5, 6)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(dim):
    idx = torch.randint(0, X.shape[dim], (3, 4, 5))
    check(lambda x: torch.gather(x, dim, idx.to(x.device)), X, atol=1e-6)


def _perm_index(shape, dim):
    # Unique positions along `dim` (scatter with duplicates is order-dependent).
    return torch.argsort(torch.rand(shape), dim=dim)


@pytest.mark.parametrize("dim", [0, -1])
def test_scatter_src_value_add(dim):
    idx = _perm_index((4, 5, 6), dim)[:3, :4, :5]
    src = torch.randn(3, 4, 5)
    check(lambda x, s: torch.scatter(x, dim, idx.to(x.device), s), X, src, atol=1e-6)
    big = torch.randn(4, 5, 6)  # src larger than index: only its leading block is used
    check(lambda x, s: torch.scatter(x, dim, idx.to(x.device), s), X, big, grad=False, atol=1e-6)
    check(lambda x: torch.scatter(x, dim, idx.to(x.device), 2.5), X, atol=1e-6)
    dup = torch.randint(0, 4, (6, 5, 6)) if dim == 0 else torch.randint(0, 6, (4, 5, 9))
    check(lambda x, s: torch.scatter_add(x, dim, dup.to(x.device), s), X,
          torch.randn(dup.shape), atol=1e-5)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    x = torch.randn(5, 3)
    idx = torch.tensor([[0, 1, 0], [2, 2, 1], [0, 0, 0], [4, 1, 2]])
    src = torch.randn(4, 3)
    check(lambda x, s: x.scatter_reduce(0, idx.to(x.device), s, reduce, include_self=include_self), x, src,
          grad=reduce in ("sum", "mean"), atol=1e-5)


def test_index_add():
    idx = torch.tensor([0, 2, 2, 3])
    check(lambda x, s: x.index_add(1, idx.to(x.device), s, alpha=-1.5), X, torch.randn(4, 4, 6), atol=1e-5)
    check(lambda x, s: x.index_add(0, idx.to(x.device), s), X, torch.randn(4, 5, 6), atol=1e-5)


@pytest.mark.parametrize("which", range(7))
def test_index_tensor(which):
    i0 = torch.tensor([0, 3, -1, 2])
    i1 = torch.tensor([[1, 4], [0, 0]])
    cases = [
        lambda x, d: x[i0.to(d)],
        lambda x, d: x[:, i1.to(d)],
        lambda x, d: x[i0.to(d), :, i0.to(d)],              # non-adjacent: index dims go first
        lambda x, d: x[:, i0[:2].to(d), i0[2:].to(d) + 3],  # adjacent, in the middle
        lambda x, d: x[i1.to(d)[:, :1], i1.to(d)],          # broadcast indices
        lambda x, d: x[..., torch.tensor(2).to(d)],
        lambda x, d: x.t()[i0[:2].to(d)] if x.dim() == 2 else x.transpose(0, 2)[i0[:2].to(d)],  # non-contiguous
    ]
    check(lambda x: cases[which](x, x.device), X, atol=1e-6)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put(accumulate):
    i0 = torch.tensor([0, 3, 1])
    i2 = torch.tensor([5, 0, 2])
    check(lambda x, v: x.index_put((i0.to(x.device),), v, accumulate), X, torch.randn(3, 5, 6), atol=1e-5)
    check(lambda x, v: x.index_put((i0.to(x.device),), v, accumulate), X, torch.randn(6), atol=1e-5)
    dup = torch.tensor([1, 1, 2])

    def f(x, v):
        y = x * 1.0
        torch.ops.aten.index_put_(y, [dup.to(x.device), None, i2.to(x.device)], v, accumulate)
        return y
    check(f, X, torch.randn(3, 5), atol=1e-5)


def test_setitem_and_masked_fill():
    def f(x):
        y = x * 1.0
        y[torch.tensor([0, 2]).to(x.device)] = 0.5
        y[:, 1] += 1
        return y.masked_fill(x > 0.5, -1.0).masked_fill(x < -1, torch.tensor(3.0).to(x.device))
    check(f, X, atol=1e-6)
    mask = torch.ones(6, 6).triu(1).bool()
    check(lambda s: s.masked_fill(mask.to(s.device), float("-inf")).softmax(-1), torch.randn(2, 6, 6), atol=1e-6)


@pytest.mark.parametrize("diag", [0, 1, -2])
def test_triu_tril(diag):
    x = torch.randn(3, 5, 4)
    check(lambda x: torch.triu(x, diag), x)
    check(lambda x: torch.tril(x, diag), x)
    check(lambda x: torch.tril(x.transpose(1, 2), diag), x)


def test_index_fill():
    idx = torch.tensor([0, -1, 2])
    check(lambda x: x.index_fill(1, idx.to(x.device), -2.0), X)
    check(lambda x: x.index_fill(-1, idx.to(x.device), torch.tensor(7.0).to(x.device)), X, grad=False)


def test_flip_roll():
    check(lambda x: (x.flip(0, -1), x.roll(2, 1), x.roll((-1, 7), (0, 2)), x.roll(5)), X)


def test_embedding():
    w = torch.randn(10, 4)
    idx = torch.tensor([[1, 2, 1, 0], [9, 0, 2, 2]])
    check(lambda w: F.embedding(idx.to(w.device), w), w)
    check(lambda w: F.embedding(idx.to(w.device), w, padding_idx=2), w)
    check(lambda w: F.embedding(idx.to(w.device), w, scale_grad_by_freq=True), w, atol=1e-6)


def test_one_hot():
    t = torch.tensor([0, 3, 1, 3])
    check(lambda t: F.one_hot(t, 5), t, grad=False)


def test_index_into_zero_size_dim_with_empty_index():
    """ViLT's embeddings index a [0, 2] tensor with an empty index: an empty result, not a
    gather that cannot slice the zero-size dim."""
    check(lambda a: a[torch.tensor([], dtype=torch.long, device=a.device)],
          torch.zeros(0, 2, dtype=torch.long), grad=False)
    check(lambda a: a[torch.tensor([], dtype=torch.long, device=a.device), 1], torch.zeros(0, 3))


@pytest.mark.parametrize("dtype,value", [(torch.float16, 70000), (torch.float16, 1e6),
                                         (torch.bfloat16, 1e39), (torch.float32, -1e39),
                                         (torch.int8, 300), (torch.int32, 2 ** 40)])
def test_fill_values_the_dtype_cannot_hold_raise_as_on_cpu(dtype, value):
    # PyTorch's kernels take the value through c10::checked_convert; XLA's convert
    # would give an infinity (or wrap an integer) without a word.
    x = torch.zeros(2, 5, dtype=dtype)
    mask = torch.ones(2, 5, dtype=torch.bool)
    idx = torch.tensor([1])
    for name, cpu_call, tpu_call in [
            ("masked_fill", lambda: x.masked_fill(mask, value),
             lambda: x.to("tpu").masked_fill(mask.to("tpu"), value)),
            ("fill_", lambda: x.clone().fill_(value), lambda: x.to("tpu").fill_(value)),
            ("index_fill", lambda: x.index_fill(1, idx, value),
             lambda: x.to("tpu").index_fill(1, idx.to("tpu"), value))]:
        with pytest.raises(RuntimeError, match="without overflow"):
            cpu_call()
        with pytest.raises(RuntimeError, match="without overflow"):
            tpu_call().cpu()
    # The largest values the dtype holds still fill.
    top = torch.finfo(dtype).max if dtype.is_floating_point else torch.iinfo(dtype).max
    assert torch.equal(x.to("tpu").masked_fill(mask.to("tpu"), top).cpu(), x.masked_fill(mask, top))

"""index_copy / index_copy_ / index_copy.out (csrc/lower/indexing.cc) against PyTorch CPU,
in both execution modes, with nothing falling back to the CPU."""
import pytest
import torch

import torch_tpu
from lower_check import check

torch.manual_seed(0)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_index_copy_functional(dim, dtype):
    x = (torch.randn(4, 5, 6) * 10).to(dtype)
    n = x.shape[dim]
    idx = torch.randperm(n)[: n // 2 + 1]
    shape = list(x.shape)
    shape[dim] = idx.numel()
    src = (torch.randn(shape) * 10).to(dtype)
    check(lambda a, s: a.index_copy(dim, idx.to(a.device), s), x, src,
          grad=dtype == torch.float32)


def test_index_copy_inplace_and_out():
    x, src = torch.randn(6, 3), torch.randn(2, 3)
    idx = torch.tensor([4, 1])

    def inplace(a, s):
        a = a.clone()
        a.index_copy_(0, idx.to(a.device), s)
        return a
    check(inplace, x, src, grad=False)

    def out(a, s):
        o = torch.empty_like(a)
        torch.index_copy(a, 0, idx.to(a.device), s, out=o)
        return o
    check(out, x, src, grad=False)


def test_index_copy_into_a_view():
    """Writing through a view reaches the base (the base's other rows are untouched)."""
    def f(a, s):
        a = a.clone()
        a[:, 1:4].index_copy_(1, torch.tensor([2, 0], device=a.device), s)
        return a
    check(f, torch.randn(3, 6), torch.randn(3, 2), grad=False)


def test_index_copy_1d_and_scalar():
    check(lambda a, s: a.index_copy(0, torch.tensor([3], device=a.device), s),
          torch.randn(5), torch.randn(1), grad=False)
    check(lambda a, s: a.index_copy(0, torch.tensor(0, device=a.device), s),
          torch.tensor(1.5), torch.tensor(-2.0), grad=False)


def test_static_kv_cache_update():
    """Transformers' StaticCache: k_out.index_copy_(2, cache_position, key_states)."""
    cache = torch.zeros(2, 4, 16, 8)
    for pos, length in ((torch.arange(5), 5), (torch.tensor([5]), 1), (torch.tensor([6]), 1)):
        states = torch.randn(2, 4, length, 8)
        ref = cache.clone()
        ref.index_copy_(2, pos, states)

        def f(c, s):
            c = c.clone()
            c.index_copy_(2, pos.to(c.device), s)
            return c
        check(f, cache, states, grad=False)
        cache = ref


def test_index_copy_counts_no_fallback():
    torch_tpu.debug.reset_metrics()
    x = torch.zeros(8, 4, device="tpu")
    x.index_copy_(0, torch.tensor([1, 6], device="tpu"), torch.ones(2, 4, device="tpu"))
    assert x.sum().item() == 8
    assert "aten::index_copy_" not in torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert "aten::index_copy.out" not in torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert torch_tpu.debug.metrics()["cpu_fallback_ops"] == 0


def test_index_copy_bad_index_dtype():
    x = torch.zeros(4, device="tpu")
    with pytest.raises(RuntimeError, match="long tensor for index"):  # as on CPU
        x.index_copy_(0, torch.tensor([1.0], device="tpu"), torch.ones(1, device="tpu"))
        x.cpu()  # Defer & Fuse reports it when the graph runs

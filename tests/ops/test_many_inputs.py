"""Calls that read many storages (_foreach ops over a model's parameters): the
argument walk indexes its inputs past a few, and a storage read through several
arguments or views must still be one program input."""
import torch

from conftest import assert_close_cpu


def _tensors(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(3 + i % 4, generator=g) for i in range(n)]


def test_foreach_many_distinct_tensors():
    xs, ys = _tensors(40, 0), _tensors(40, 1)
    txs, tys = [x.to("tpu") for x in xs], [y.to("tpu") for y in ys]
    torch._foreach_addcmul_(txs, tys, tys, value=0.5)
    torch._foreach_addcmul_(xs, ys, ys, value=0.5)
    for t, c in zip(txs, xs):
        assert_close_cpu(t, c)


def test_foreach_repeated_and_aliased_inputs():
    # One storage reached through many list entries and through views of it,
    # beyond the first inputs (where the walk scans instead of indexing).
    base = torch.randn(64)
    others = _tensors(30, 2)
    tbase, tothers = base.to("tpu"), [o.to("tpu") for o in others]
    cpu_list = others + [base[:8], base[8:16], base, base[:8]] + others[:5]
    tpu_list = tothers + [tbase[:8], tbase[8:16], tbase, tbase[:8]] + tothers[:5]
    cpu_out = torch._foreach_mul(cpu_list, 1.5)
    tpu_out = torch._foreach_mul(tpu_list, 1.5)
    for t, c in zip(tpu_out, cpu_out):
        assert_close_cpu(t, c)
    # An in-place call whose scalar-list and tensor-list inputs come after many others.
    ws = [o.clone() for o in others]
    tws = [w.to("tpu") for w in ws]
    scalars = [0.5 + i for i in range(len(ws))]
    torch._foreach_add_(ws, others, alpha=2.0)
    torch._foreach_add_(tws, tothers, alpha=2.0)
    torch._foreach_mul_(ws, scalars)
    torch._foreach_mul_(tws, scalars)
    for t, c in zip(tws, ws):
        assert_close_cpu(t, c)

"""torch.tril_indices / torch.triu_indices run natively on tpu (no CPU fallback) and
give exactly the CPU's indices for every offset and shape, in both execution modes."""
import pytest
import torch

import torch_tpu
from conftest import assert_close_cpu

SHAPES = [(1, 1), (3, 3), (4, 7), (7, 4), (5, 1), (1, 6), (0, 3), (3, 0), (0, 0), (27, 27)]


def _offsets(row, col):
    # Every offset where the triangle changes, and a little past both ends.
    return sorted(set(range(-row - 2, col + 3)) | {-100, 100})


def _no_fallback():
    fallbacks = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert not fallbacks, f"ops fell back to the CPU: {fallbacks}"


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_matches_cpu_for_every_offset(fn, shape):
    row, col = shape
    torch_tpu.debug.reset_metrics()
    for offset in _offsets(row, col):
        got = fn(row, col, offset, device="tpu")
        assert_close_cpu(got, fn(row, col, offset))
    _no_fallback()


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_dtype(fn, dtype):
    torch_tpu.debug.reset_metrics()
    assert_close_cpu(fn(6, 9, -2, dtype=dtype, device="tpu"), fn(6, 9, -2, dtype=dtype))
    _no_fallback()


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16])
def test_unsupported_dtype_raises_as_on_cpu(fn, dtype):
    with pytest.raises(RuntimeError, match="not implemented"):
        fn(3, 3, dtype=dtype)
    with pytest.raises(RuntimeError, match="not implemented"):
        fn(3, 3, dtype=dtype, device="tpu")


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_large_is_exact(fn):
    # Positions in the millions: the row found from a float square root must be
    # corrected exactly, or an index near a row boundary would be off by one.
    torch_tpu.debug.reset_metrics()
    for row, col, offset in [(2000, 2100, 0), (2100, 2000, -7), (1500, 3000, 900)]:
        assert_close_cpu(fn(row, col, offset, device="tpu"), fn(row, col, offset))
    _no_fallback()


def test_pairwise_interaction_gather():
    # The way DLRM uses it: the strict lower triangle of Z Z^T, picked by index.
    torch_tpu.debug.reset_metrics()
    z = torch.randn(4, 6, 8)
    zt = z.to("tpu")
    dots, dots_t = z @ z.transpose(1, 2), zt @ zt.transpose(1, 2)
    i, j = torch.tril_indices(6, 6, -1)
    it, jt = torch.tril_indices(6, 6, -1, device="tpu")
    assert_close_cpu(dots_t[:, it, jt], dots[:, i, j])
    _no_fallback()


@pytest.mark.parametrize("fn", [torch.tril_indices, torch.triu_indices])
def test_negative_sizes_raise(fn):
    with pytest.raises(RuntimeError, match="non-negative|must be"):
        fn(-1, 3, device="tpu")
    with pytest.raises(RuntimeError, match="non-negative|must be"):
        fn(3, -2, device="tpu")


def test_compiled_graph():
    # torch.compile(backend="tpu") lowers the op inside the graph through the same entry.
    torch_tpu.debug.reset_metrics()

    def pairs(z):
        i, j = torch.tril_indices(z.shape[1], z.shape[1], -1, device=z.device)
        return (z @ z.transpose(1, 2))[:, i, j]

    z = torch.randn(3, 5, 4)
    got = torch.compile(pairs, backend="tpu")(z.to("tpu"))
    assert_close_cpu(got, pairs(z))
    _no_fallback()

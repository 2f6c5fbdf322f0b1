"""torch._grouped_mm on tpu (csrc/aten/grouped_mm_kernel.cc: a decomposition at the tpu
autograd key), forward and backward, in both execution modes, float32 with widths whose
strides are not 16-byte multiples. The reference is the per-group matmul written with
slices on the CPU: PyTorch's CPU _grouped_mm rejects those strides and leaves the rows
past the last offset uninitialised (tpu gives zeros there)."""
import pytest
import torch

import torch_tpu
from lower_check import check


def _bounds(offs):
    ends = offs.tolist()
    return list(zip([0] + ends[:-1], ends))


def grouped(a, b, offs=None):
    """torch._grouped_mm on tpu; the slice-by-slice definition on the CPU."""
    if a.device.type == "tpu":
        return torch._grouped_mm(a, b, offs=offs)
    if offs is None:
        return torch.bmm(a, b)
    spans = _bounds(offs)
    if a.dim() == 2 and b.dim() == 3:
        parts = [a[s:e] @ b[g] for g, (s, e) in enumerate(spans)]
        rest = a.new_zeros(a.shape[0] - spans[-1][1], b.shape[-1])
        return torch.cat(parts + [rest])
    if a.dim() == 3 and b.dim() == 2:
        parts = [a[g] @ b[:, s:e] for g, (s, e) in enumerate(spans)]
        rest = a.new_zeros(a.shape[1], b.shape[1] - spans[-1][1])
        return torch.cat(parts + [rest], 1)
    return torch.stack([a[:, s:e] @ b[s:e] for s, e in spans])


@pytest.mark.parametrize("widths", [(8, 4), (5, 3), (6, 7)])
def test_grouped_mm_rows(widths):
    k, n = widths
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)  # an empty group, rows 7.. unused
    check(grouped, torch.randn(10, k), torch.randn(3, k, n), offs, atol=1e-5, rtol=1e-5)


def test_grouped_mm_transposed_weight_like_transformers():
    offs = torch.tensor([3, 4, 8, 9], dtype=torch.int32)
    check(lambda x, m, o: grouped(x, m.transpose(-2, -1), o), torch.randn(9, 5), torch.randn(4, 3, 5),
          offs, atol=1e-5, rtol=1e-5)
    out = torch.nn.functional.grouped_mm(torch.ones(9, 5, device="tpu"), torch.ones(4, 5, 3, device="tpu"),
                                         offs=offs.to("tpu"))
    torch.testing.assert_close(out.cpu(), torch.full((9, 3), 5.0))


def test_grouped_mm_other_layouts():
    offs = torch.tensor([1, 4, 6], dtype=torch.int32)
    check(grouped, torch.randn(3, 4, 5), torch.randn(3, 5, 2), atol=1e-5, rtol=1e-5)
    check(grouped, torch.randn(3, 4, 5), torch.randn(5, 7), offs, atol=1e-5, rtol=1e-5)
    check(grouped, torch.randn(4, 7), torch.randn(7, 3), offs, atol=1e-5, rtol=1e-5)


def test_grouped_mm_bfloat16():
    offs = torch.tensor([3, 8], dtype=torch.int32)
    check(grouped, torch.randn(8, 16).bfloat16(), torch.randn(2, 16, 8).bfloat16(), offs,
          atol=2e-2, rtol=2e-2)


def test_grouped_mm_bad_input():
    a, b = torch.randn(4, 3, device="tpu"), torch.randn(2, 3, 5, device="tpu")
    offs = torch.tensor([1, 4], dtype=torch.int32, device="tpu")
    with pytest.raises(RuntimeError, match="offs is required"):
        torch._grouped_mm(a, b)
    with pytest.raises(RuntimeError, match="contraction"):
        torch._grouped_mm(a, torch.randn(2, 4, 5, device="tpu"), offs=offs)
    with pytest.raises(RuntimeError, match="groups"):
        torch._grouped_mm(a, b, offs=torch.tensor([4], dtype=torch.int32, device="tpu"))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch._grouped_mm(a, b.double(), offs=offs)
    assert not torch_tpu.debug.metrics()["cpu_fallback_counts"]

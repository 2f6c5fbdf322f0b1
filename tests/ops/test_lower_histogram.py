"""histc (csrc/lower/histogram.cc) with CUDA's semantics, integer inputs included.

PyTorch's CPU kernel has no integer histc ("histogram_cpu" not implemented for 'Int'),
so integer inputs are compared with the CPU's float64 histc of the same values (exact
for small integers) and with bincount."""
import pytest
import torch
import torch_tpu

from lower_check import check


@pytest.mark.parametrize("kw", [dict(bins=10), dict(bins=7, min=-1, max=1), dict(bins=5, min=2, max=2),
                                dict(bins=1), dict(bins=4, min=-0.5, max=0.25)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_float_matches_cpu(kw, dtype):
    torch.manual_seed(0)
    check(lambda x: torch.histc(x, **kw), torch.randn(3, 100, dtype=dtype), grad=False, atol=0)


def test_histc_float_edges_outside_and_nan():
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, -1.0, 4.0, float("nan"), 2.999])
    check(lambda t: (torch.histc(t, bins=3, min=0, max=3), torch.histc(t, bins=4, min=1, max=2)),
          x, grad=False, atol=0)


def test_histc_data_range_and_empty():
    check(lambda t: torch.histc(t, bins=4), torch.tensor([2.0, 2.0]), grad=False, atol=0)
    check(lambda t: torch.histc(t, bins=3), torch.tensor([]), grad=False, atol=0)
    check(lambda t: torch.histc(t, bins=3, min=1, max=1), torch.tensor([]), grad=False, atol=0)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.int16])
def test_histc_integer_inputs(dtype, metrics_delta):
    torch.manual_seed(0)
    ids = torch.randint(0, 8, (6, 2), dtype=dtype)  # MoE routing: expert ids per token
    out = torch.histc(ids.to("tpu"), bins=8, min=0, max=7)
    assert out.dtype == dtype and out.device.type == "tpu"
    assert out.cpu().tolist() == torch.bincount(ids.flatten().long(), minlength=8).tolist()
    # Data-driven range and integer division of the bin position, as CUDA computes it.
    x = torch.tensor([3, 5, 9, 9, 4, 12], dtype=dtype)
    got = torch.histc(x.to("tpu"), bins=4)
    assert got.cpu().tolist() == [3, 0, 2, 1]  # range [3, 12]: bins of width 2.25
    assert torch.histc(x.double(), bins=4).tolist() == [3, 0, 2, 1]
    got = torch.histc(x.to("tpu"), bins=3, min=4, max=9)  # 3 and 12 are outside
    assert got.cpu().tolist() == torch.histc(x.double(), bins=3, min=4, max=9).long().tolist()
    assert metrics_delta("cpu_fallback_ops") == 0


def test_histc_bad_arguments_raise():
    x = torch.randn(5, device="tpu")
    with pytest.raises(RuntimeError, match="bins must be > 0"):
        torch.histc(x, bins=0)
    with pytest.raises(RuntimeError, match="max must be larger than min"):
        torch.histc(x, bins=3, min=3, max=1)
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histc(x, bins=3, min=0, max=float("inf"))

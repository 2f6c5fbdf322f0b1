"""repeat_interleave on tpu (csrc/aten/repeat_interleave_kernels.cc) against PyTorch CPU, in
both execution modes, with nothing falling back to the CPU."""
import pytest
import torch

from lower_check import check


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_repeat_interleave_tensor(dtype):
    check(lambda r: torch.repeat_interleave(r), torch.tensor([2, 0, 3, 1]).to(dtype), grad=False)
    check(lambda r: torch.repeat_interleave(r, output_size=6), torch.tensor([2, 0, 3, 1]).to(dtype),
          grad=False)
    check(lambda r: torch.repeat_interleave(r), torch.tensor([], dtype=dtype), grad=False)


def test_repeat_interleave_self_overloads():
    """x.repeat_interleave(r, dim): the composite over repeat_interleave.Tensor and index_select."""
    x = torch.randn(3, 4)
    check(lambda a: a.repeat_interleave(torch.tensor([1, 0, 2], device=a.device), dim=0), x)
    check(lambda a: a.repeat_interleave(torch.tensor([2, 1, 1, 3], device=a.device), dim=1), x)
    check(lambda a: a.repeat_interleave(2, dim=0), x)


def test_fastspeech_style_length_regulator():
    """Durations expand phoneme states: repeat_interleave by per-row durations."""
    states, durations = torch.randn(5, 8), torch.tensor([1, 3, 0, 2, 2])
    check(lambda s, d: torch.repeat_interleave(s, d, dim=0), states, durations)


def test_repeat_interleave_bad_repeats():
    with pytest.raises(RuntimeError, match="can not be negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="tpu"))
    with pytest.raises(RuntimeError, match="1D"):
        torch.repeat_interleave(torch.ones(2, 2, dtype=torch.long, device="tpu"))

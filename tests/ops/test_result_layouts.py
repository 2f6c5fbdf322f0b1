"""A new result takes the layout PyTorch gives it (its meta kernel's strides): an
elementwise op on a transposed or channels-last input keeps that memory order, as
on the CPU. torch.compile depends on it (tests/compile/test_compiled_layouts.py):
AOTAutograd's graphs view results by the strides the meta kernels promised."""
import pytest
import torch

from conftest import assert_close_cpu


def _same_layout(fn, *cpu_inputs):
    want = fn(*cpu_inputs)
    got = fn(*[x.to("tpu") for x in cpu_inputs])
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    assert_close_cpu(got, want)
    return got


@pytest.mark.parametrize("fn", [
    lambda x: x.transpose(1, 2) * 2,
    lambda x: torch.sigmoid(x.transpose(1, 2)),
    lambda x: x.permute(2, 0, 1) + x.permute(2, 0, 1),
    lambda x: x.transpose(0, 2) * x[:1].transpose(0, 2),  # with a broadcast operand
])
def test_elementwise_result_keeps_the_input_layout(fn):
    _same_layout(fn, torch.randn(2, 8, 6))


def test_channels_last_result_stays_channels_last():
    x = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)
    got = _same_layout(lambda t: torch.relu(t) + 1, x)
    assert got.is_contiguous(memory_format=torch.channels_last)


def test_view_after_transposing_back_works_as_on_the_cpu():
    # a transposed result transposed back is contiguous again: .view works, as on the CPU
    x = torch.randn(2, 8, 6)
    got = _same_layout(lambda t: (t.transpose(1, 2) * 3).transpose(1, 2).view(16, 6), x)
    assert got.is_contiguous()


def test_permuted_result_feeds_later_ops():
    x = torch.randn(3, 4, 5)
    _same_layout(lambda t: ((t.permute(1, 2, 0) * 2) @ torch.ones(3, 2, device=t.device)).sum(0), x)

"""torch.zeros on tpu (its own kernel: in Strict Eager an uploaded zero buffer instead
of a zero_ program; in Defer & Fuse a recorded zero_). Runs in both modes (conftest)."""
import pytest
import torch

from conftest import assert_close_cpu


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32,
                                   torch.bool, torch.complex64])
@pytest.mark.parametrize("shape", [(), (0,), (7,), (3, 5), (2, 0, 4), (2, 3, 4)])
def test_zeros_matches_cpu(dtype, shape):
    assert_close_cpu(torch.zeros(shape, dtype=dtype, device="tpu"), torch.zeros(shape, dtype=dtype))


def test_zeros_then_written_in_place():
    z = torch.zeros(4, 3, device="tpu")
    z[1] += 2
    z.add_(1)
    ref = torch.zeros(4, 3)
    ref[1] += 2
    ref.add_(1)
    assert_close_cpu(z, ref)


def test_zeros_default_dtype_and_memory_accounting():
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    z = torch.zeros(1024, device="tpu")
    assert z.dtype == torch.get_default_dtype()
    z.cpu()
    assert torch.tpu.max_memory_allocated() >= base + 4096
    del z


def test_zeros_bad_dtype_is_a_python_error():
    with pytest.raises((RuntimeError, TypeError)):
        torch.zeros(3, dtype=torch.quint8, device="tpu")


class _TwoOutputs(torch.autograd.Function):
    """Autograd materialises a zero gradient (at::zeros) for the unused output."""

    @staticmethod
    def forward(ctx, x):
        return x * 2, x * 3

    @staticmethod
    def backward(ctx, ga, gb):
        return ga * 2 + gb * 3


def _grad_through_two_outputs(dev):
    x = torch.arange(6.0, device=dev).reshape(2, 3).requires_grad_()
    a, _ = _TwoOutputs.apply(x)
    (a * a).sum().backward()
    return x.grad


def test_autograd_zero_grad_of_unused_output():
    assert_close_cpu(_grad_through_two_outputs("tpu"), _grad_through_two_outputs("cpu"))


def test_fresh_zero_storages_stay_independent():
    # Small zero buffers are shared between fresh storages (engine/transfer.h):
    # writing one storage, in place or through out=, must leave the others zero.
    a = torch.zeros(8, device="tpu")
    b = torch.zeros(8, device="tpu")
    out = torch.empty(0, dtype=torch.int64, device="tpu")
    a.add_(3)
    torch.arange(0, 8, out=out)
    out.mul_(2)
    c = torch.zeros(8, device="tpu")
    d = torch.zeros(8, dtype=torch.int64, device="tpu")
    assert_close_cpu(a, torch.full((8,), 3.0))
    assert_close_cpu(b, torch.zeros(8))
    assert_close_cpu(out, torch.arange(0, 8) * 2)
    assert_close_cpu(c, torch.zeros(8))
    assert_close_cpu(d, torch.zeros(8, dtype=torch.int64))

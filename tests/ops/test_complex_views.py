"""view_as_real / view_as_complex on tpu (csrc/aten/complex_view_kernels.cc; complex storages
read through a float view and back in csrc/aten/op_emit.cc) against PyTorch CPU, in both
execution modes, with nothing falling back to the CPU."""
import pytest
import torch

import torch_tpu
from lower_check import check


def test_view_as_complex_and_back():
    x = torch.randn(3, 4, 2)
    check(lambda a: torch.view_as_real(torch.view_as_complex(a) * 2), x)
    check(lambda a: torch.view_as_complex(a).abs(), x)


def test_view_as_real_of_complex_tensor():
    z = torch.complex(torch.randn(5, 3), torch.randn(5, 3))
    check(lambda a: torch.view_as_real(a) + 1, z, grad=False)
    check(lambda a: torch.view_as_real(a).sum(-1), z, grad=False)


def test_views_alias_their_storage():
    """A write through the float view shows in the complex tensor and the other way round."""
    for dev in ("cpu", "tpu"):
        z = torch.zeros(4, dtype=torch.complex64, device=dev)
        r = torch.view_as_real(z)
        r[:, 1] = torch.arange(4.0, device=dev)  # imaginary parts
        z[0] = 3 + 0j
        out = (z.cpu(), r.cpu())
        if dev == "cpu":
            want = out
    assert torch.view_as_real(z).data_ptr() == z.data_ptr()
    torch.testing.assert_close(out[0], want[0])
    torch.testing.assert_close(out[1], want[1])


def test_view_as_complex_of_slices_and_offsets():
    x = torch.randn(2, 6, 8)
    check(lambda a: torch.view_as_complex(a[:, 2:].reshape(2, 4, 4, 2)) * 1j, x, grad=False)
    check(lambda a: torch.view_as_real(torch.view_as_complex(a.reshape(2, 6, 4, 2))[:, 1:, 2]), x,
          grad=False)


def test_llama4_style_complex_rotary():
    """Llama 4's apply_rotary_emb: pairs as complex numbers times a polar table."""
    xq = torch.randn(1, 5, 2, 8)
    freqs = torch.outer(torch.arange(5.0), 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8)))

    def rope(q, f):
        cis = torch.polar(torch.ones_like(f), f)
        q_ = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
        return torch.view_as_real(q_ * cis[:, None, :]).flatten(3)

    check(rope, xq, freqs, atol=1e-5, rtol=1e-5)


def test_view_as_complex_bad_input():
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        torch.view_as_complex(torch.randn(3, 3, device="tpu"))
    with pytest.raises(RuntimeError, match="only supported for complex"):
        torch.view_as_real(torch.randn(3, 2, device="tpu"))
    assert not torch_tpu.debug.metrics()["cpu_fallback_counts"]

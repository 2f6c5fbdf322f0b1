"""PyTorch's lazy conjugate / negative bits (Tensor.conj(), _neg_view) on tpu:
copy_ and the lowered ops that ATen's Conjugate fallback passes straight
through (clone, mm, ...) must see the logical values, not the raw buffer."""
import torch

import torch_tpu

torch.manual_seed(0)
Z = torch.randn(4, 3, dtype=torch.complex64)
W = torch.randn(3, 5, dtype=torch.complex64)


def _same(t, ref):
    assert t.device.type == "tpu"
    torch.testing.assert_close(t.cpu(), ref, atol=1e-5, rtol=1e-5)


def test_conj_view_reads_and_copies():
    torch_tpu.debug.reset_metrics()
    t = Z.to("tpu")
    assert t.conj().is_conj()
    torch.testing.assert_close(t.conj().cpu(), Z.conj())
    _same(t.conj().resolve_conj(), Z.conj())
    _same(t.conj().clone(), Z.conj())
    _same(t.conj() * 2, Z.conj() * 2)
    _same(t.conj() @ W.to("tpu"), Z.conj() @ W)
    _same(torch.conj_physical(t), Z.conj())
    _same(torch._neg_view(t), -Z)
    _same(torch._neg_view(t.conj()).resolve_neg().resolve_conj(), -Z.conj())
    assert not torch_tpu.debug.metrics()["cpu_fallback_counts"]


def test_copy_into_and_from_conj_views():
    t = Z.to("tpu")
    _same(Z.conj().to("tpu"), Z.conj())        # host source with the bit
    d = torch.zeros(4, 3, dtype=torch.complex64, device="tpu")
    d.conj().copy_(t)                           # destination with the bit
    _same(d, Z.conj())
    d.copy_(t.conj())                           # device source with the bit
    _same(d, Z.conj())
    h = torch.zeros(4, 3, dtype=torch.complex64)
    h.copy_(t.conj())                           # device -> host
    torch.testing.assert_close(h, Z.conj())

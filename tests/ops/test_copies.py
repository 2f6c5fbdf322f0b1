"""Copies cpu <-> tpu <-> tpu: layouts, dtype changes, non_blocking; .item(), print, save/load."""
import io
import warnings

import pytest
import torch
import torch_tpu

from conftest import assert_close_cpu


def test_roundtrip_dtypes():
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                  torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64):
        src = (torch.arange(12) % 5).reshape(3, 4).to(dtype)
        t = src.to("tpu")
        assert t.dtype == dtype and t.device.type == "tpu"
        assert torch.equal(t.cpu(), src), dtype


def test_noncontiguous_cpu_to_tpu():
    src = torch.arange(24.0).reshape(4, 6)
    assert_close_cpu(src.t().to("tpu"), src.t())
    assert_close_cpu(src[::2, 1::2].to("tpu"), src[::2, 1::2])
    dst = torch.zeros(6, 4, device="tpu")
    dst.t().copy_(src)                    # into a non-contiguous tpu view
    assert_close_cpu(dst, src.t().contiguous())
    dst2 = torch.zeros(4, 6, device="tpu")
    dst2[1:3, ::2].copy_(src[:2, 3:])     # both sides strided
    ref = torch.zeros(4, 6)
    ref[1:3, ::2].copy_(src[:2, 3:])
    assert_close_cpu(dst2, ref)


def test_noncontiguous_tpu_to_cpu():
    src = torch.arange(24.0).reshape(4, 6)
    t = src.to("tpu")
    assert torch.equal(t.t().cpu(), src.t())
    assert torch.equal(t[1:, ::3].cpu(), src[1:, ::3])
    out = torch.zeros(6, 4)
    out.t().copy_(t)
    assert torch.equal(out, src.t())


def test_tpu_to_tpu():
    src = torch.arange(24.0).reshape(2, 3, 4)
    t = src.to("tpu")
    c = t.clone()
    assert c.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    assert_close_cpu(c, src)
    d = torch.empty(4, 3, 2, device="tpu")
    d.copy_(t.permute(2, 1, 0))
    assert_close_cpu(d, src.permute(2, 1, 0).contiguous())
    e = torch.zeros(2, 3, 4, device="tpu")
    e[:, 1].copy_(t[:, 2])
    ref = torch.zeros(2, 3, 4)
    ref[:, 1].copy_(src[:, 2])
    assert_close_cpu(e, ref)
    assert_close_cpu(t.permute(1, 0, 2).contiguous(), src.permute(1, 0, 2).contiguous())


def test_dtype_changes():
    src = torch.tensor([[-1.5, 0.25, 2.75], [3.5, -0.0, 100.9]])
    t = src.to("tpu")
    for dtype in (torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64,
                  torch.bool):
        assert_close_cpu(t.to(dtype), src.to(dtype))
        assert_close_cpu(src.to("tpu", dtype), src.to(dtype))
        assert torch.equal(t.to(dtype).cpu(), src.to(dtype))
    assert torch.equal(t.to(torch.float64).to(torch.float32).cpu(), src)
    # tpu -> cpu with a dtype change; copy_ between dtypes on the device.
    assert torch.equal(t.to("cpu", torch.int64), src.to(torch.int64))
    dst = torch.zeros(2, 3, dtype=torch.float64, device="tpu")
    dst.copy_(t.t().t())
    assert_close_cpu(dst, src.double())
    dst_i = torch.zeros(3, 2, dtype=torch.int32, device="tpu")
    dst_i.copy_(src.t())
    assert torch.equal(dst_i.cpu(), src.t().to(torch.int32))


def test_non_blocking():
    src = torch.randn(64, 32)
    t = src.to("tpu", non_blocking=True)
    back = t.to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(back, src)
    d = torch.empty(64, 32, device="tpu")
    d.copy_(t, non_blocking=True)
    assert torch.equal(d.cpu(), src)
    pinned_like = torch.empty(64, 32)
    pinned_like.copy_(d, non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(pinned_like, src)


def test_broadcasting_copy():
    d = torch.zeros(3, 4, device="tpu")
    d.copy_(torch.arange(4.0))
    assert torch.equal(d.cpu(), torch.arange(4.0).expand(3, 4))
    d.copy_(torch.arange(3.0, device="tpu").unsqueeze(1))
    assert torch.equal(d.cpu(), torch.arange(3.0).unsqueeze(1).expand(3, 4))


def test_item():
    assert torch.tensor(3.5, device="tpu").item() == 3.5
    assert torch.tensor([7], device="tpu").item() == 7
    assert torch.tensor(True, device="tpu").item() is True
    x = torch.arange(10.0, device="tpu")
    assert x[3].item() == 3.0
    assert x.sum().item() == 45.0
    assert isinstance(torch.tensor(2, device="tpu").item(), int)
    with pytest.raises(RuntimeError):
        x.item()
    assert x.tolist() == list(map(float, range(10)))


def test_print_matches_cpu_without_fallback():
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    cases = [
        torch.arange(6.0).reshape(2, 3),
        torch.tensor([1.5, float("inf"), -2e-5, float("nan"), 0.0]),
        torch.tensor([1e10, 1.0]),
        torch.tensor([1, -2, 300]),
        torch.tensor([True, False]),
        torch.tensor(3.25),
        torch.zeros(0),
        torch.randn(30, 40),
        torch.tensor([1.0, 2.0], dtype=torch.float64),
        torch.tensor([1.0, 2.5], dtype=torch.bfloat16),
    ]
    for c in cases:
        t = c.to("tpu")
        got = repr(t)
        assert "device='tpu:0'" in got
        def norm(r):
            return "".join(r.split())
        assert norm(got).replace(",device='tpu:0'", "") == norm(repr(c)), (got, repr(c))
        assert str(t) == got
    after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert after == before, f"printing fell back to the CPU: {after}"


def test_storage_and_dtype_views():
    a = torch.arange(6.0)
    t = a.to("tpu")
    assert t.untyped_storage().cpu().tolist() == a.untyped_storage().tolist()
    assert torch.equal(t.view(torch.int32).cpu(), a.view(torch.int32))
    assert torch.equal(t.view(torch.uint8).cpu(), a.view(torch.uint8))
    b = torch.arange(16, dtype=torch.uint8)
    assert torch.equal(b.to("tpu").view(torch.float32).cpu(), b.view(torch.float32))
    flags = torch.tensor([True, False, True])
    assert torch.equal(flags.to("tpu").view(torch.int8).cpu(), flags.view(torch.int8))
    u = t.view(torch.int32)
    u[0] = 1065353216                      # the bits of 1.0f, written through the int view
    assert t[0].item() == 1.0


def test_nonzero_and_masked_select():
    src = torch.tensor([[0.0, 1.5, -2.0], [3.0, 0.0, 0.5]])
    t = src.to("tpu")
    assert_close_cpu(torch.nonzero(t), torch.nonzero(src))
    assert_close_cpu(torch.masked_select(t, t > 0.7), torch.masked_select(src, src > 0.7))
    assert_close_cpu(t[t > 0], src[src > 0])
    with pytest.raises(RuntimeError, match="same device"):
        torch.masked_select(t, src > 0)


@pytest.mark.parametrize("map_location", ["cpu", "tpu"])
def test_save_load(map_location):
    src = {"w": torch.randn(3, 4), "i": torch.arange(5), "v": torch.arange(10.0)[2:7]}
    tpu = {k: v.to("tpu") for k, v in src.items()}
    buf = io.BytesIO()
    torch.save(tpu, buf)
    buf.seek(0)
    loaded = torch.load(buf, map_location=map_location)
    for k, v in src.items():
        assert loaded[k].device.type == map_location
        assert torch.equal(loaded[k].cpu(), v)
    buf.seek(0)
    same = torch.load(buf)  # default: back onto the tpu
    assert same["w"].device.type == "tpu" and torch.equal(same["w"].cpu(), src["w"])

"""Pinned host memory with tpu as on CUDA: pin_memory(), is_pinned(), pin_memory=True
factories and DataLoaders, and non_blocking copies from and to pinned memory."""
import gc

import pytest
import torch

import torch_tpu

MODES = pytest.mark.parametrize("tpu_execution_mode", ["strict_eager", "defer_and_fuse"],
                                indirect=True, ids=["eager", "fused"])


def test_pin_memory_and_is_pinned():
    x = torch.randn(64, 3)
    assert not x.is_pinned()
    p = x.pin_memory()
    assert p.is_pinned() and p.device.type == "cpu"
    assert p[5:].is_pinned() and p.t().is_pinned()  # views of pinned memory are pinned
    assert torch.equal(p, x) and not x.is_pinned()
    assert p.pin_memory().data_ptr() == p.data_ptr()  # already pinned: no copy
    assert torch.empty(10, pin_memory=True).is_pinned()
    assert torch.zeros(0, pin_memory=True).is_pinned()
    assert not torch.ones(3, device="tpu").is_pinned()


def test_pinned_memory_is_released():
    gc.collect()
    p = torch.empty(1 << 16, pin_memory=True)
    addr = p.data_ptr()
    del p
    gc.collect()
    # The range is forgotten with the memory: a later plain allocation there is not pinned.
    q = torch.empty(1 << 16)
    assert not q.is_pinned() or q.data_ptr() != addr


@MODES
def test_non_blocking_copies_through_pinned_memory(tpu_execution_mode):
    src = torch.randn(256, 8).pin_memory()
    ref = src.clone()
    dev = src.to("tpu", non_blocking=True)
    src.zero_()  # the host copy is free to change once the copy call returned
    y = dev * 2
    out = torch.empty(256, 8, pin_memory=True)
    out.copy_(y, non_blocking=True)
    e = torch.tpu.Event()
    e.record()
    e.synchronize()
    torch.testing.assert_close(out, ref * 2)
    assert out.is_pinned()
    host = y.to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    torch.testing.assert_close(host, ref * 2)


def test_dataloader_pin_memory():
    data = torch.utils.data.TensorDataset(torch.randn(16, 3), torch.arange(16))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    for xb, yb in loader:
        assert xb.is_pinned() and yb.is_pinned()
        torch.testing.assert_close(xb.to("tpu", non_blocking=True).cpu(), xb)


def test_empty_host_cache_answers():
    torch.empty(8, pin_memory=True)
    torch.accelerator.empty_host_cache()

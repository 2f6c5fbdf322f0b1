"""Memory accounting of torch.tpu (our own: PJRT CPU has none).

Bytes count once a storage holds a device buffer (torch.empty allocates lazily)."""
import gc

import torch


def test_allocated_tracks_live_tensors():
    gc.collect()
    before = torch.tpu.memory_allocated()
    x = torch.ones(1024, dtype=torch.float32, device="tpu")
    assert torch.tpu.memory_allocated() == before + 4096
    assert torch.tpu.memory_allocated(0) == torch.tpu.memory_allocated("tpu:0")
    del x
    gc.collect()
    assert torch.tpu.memory_allocated() == before


def test_peak_and_reset():
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() == base
    x = torch.zeros(4096, device="tpu")
    del x
    assert torch.tpu.max_memory_allocated() >= base + 4 * 4096
    assert torch.tpu.memory_allocated() == base
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base


def test_memory_stats_and_empty_cache():
    x = torch.ones(100, device="tpu")
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["allocated_bytes.all.peak"] == torch.tpu.max_memory_allocated()
    assert stats["allocated_bytes.all.current"] >= 400
    torch.tpu.empty_cache()
    assert x.sum().item() == 100.0

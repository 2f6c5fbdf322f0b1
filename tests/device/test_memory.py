"""Memory accounting of torch.tpu (our own: PJRT CPU has none).

Bytes count once a storage holds a device buffer (torch.empty allocates lazily)."""
import gc

import pytest

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


# ---- the registered DeviceAllocator: torch.accelerator's memory API on tpu -------

def _settled():
    gc.collect()
    torch.tpu.synchronize()


def test_accelerator_memory_functions_answer():
    _settled()
    base = torch.accelerator.memory_allocated()
    x = torch.ones(2048, device="tpu")
    assert torch.accelerator.memory_allocated() == base + 8192 == torch.tpu.memory_allocated()
    assert torch.accelerator.memory_allocated("tpu:0") == base + 8192
    assert torch.accelerator.max_memory_allocated() >= base + 8192
    assert torch.accelerator.memory_reserved() == torch.accelerator.memory_allocated()
    assert torch.accelerator.max_memory_reserved() >= torch.accelerator.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + 8192
    assert stats["allocation.all.current"] >= 1
    assert torch.tpu.memory_stats() == stats
    torch.accelerator.empty_cache()
    torch.tpu.empty_cache()
    assert x.sum().item() == 2048  # nothing was freed under a live tensor
    del x
    _settled()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.accelerator.max_memory_allocated() == torch.accelerator.memory_allocated() == base


def test_accumulated_stats_and_reset():
    _settled()
    torch.accelerator.reset_accumulated_memory_stats()
    before = torch.accelerator.memory_stats()
    assert before["allocated_bytes.all.allocated"] == 0 and before["allocation.all.freed"] == 0
    x = torch.zeros(100, device="tpu") + 1
    del x
    _settled()
    after = torch.accelerator.memory_stats()
    assert after["allocated_bytes.all.allocated"] >= 400
    assert after["allocated_bytes.all.freed"] == after["allocated_bytes.all.allocated"]
    assert after["allocation.all.allocated"] == after["allocation.all.freed"] >= 1
    torch.tpu.reset_accumulated_memory_stats()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.allocated"] == 0


def test_mem_get_info_consistent_with_allocations():
    _settled()
    free0, total = torch.tpu.mem_get_info()
    assert (free0, total)[1] == torch.accelerator.get_memory_info()[1]
    assert total > 0 and 0 <= free0 <= total
    assert torch.tpu.get_device_properties().total_memory == total
    used0 = torch.tpu.memory_allocated()
    x = torch.ones(1 << 20, device="tpu")  # 4 MiB
    free1, total1 = torch.tpu.mem_get_info()
    assert total1 == total
    assert free1 == total - used0 - (4 << 20)
    assert free0 - free1 == 4 << 20
    del x
    _settled()
    assert torch.tpu.mem_get_info() == (free0, total)


def test_mem_get_info_bad_device():
    with pytest.raises(RuntimeError, match="out of range"):
        torch.tpu.mem_get_info(7)


def test_resize_accounting_returns_to_baseline():
    _settled()
    base = torch.accelerator.memory_allocated()
    p = torch.randn(128, 128, device="tpu")
    assert torch.accelerator.memory_allocated() == base + 128 * 128 * 4
    p.untyped_storage().resize_(0)
    assert torch.accelerator.memory_allocated() == base
    p.untyped_storage().resize_(128 * 128 * 4)
    p.copy_(torch.ones(128, 128))
    assert torch.accelerator.memory_allocated() == base + 128 * 128 * 4
    free, total = torch.accelerator.get_memory_info()
    assert free == total - torch.accelerator.memory_allocated()
    del p
    _settled()
    assert torch.accelerator.memory_allocated() == base


@pytest.mark.strict_only  # Defer & Fuse does not materialise its step for a query
def test_accelerator_queries_settle_pipelined_ops_in_strict_eager():
    """A cold op is recorded while its program compiles (pipelined compilation) and its
    result is held until the next sync point; every memory query, torch.accelerator's
    (the registered DeviceAllocator) as torch.tpu's, is one, so it counts what the ops as
    written leave allocated."""
    import torch_tpu
    n = 331 * 7 * 4
    for query in (lambda: torch.accelerator.memory_allocated(),
                  lambda: torch.accelerator.memory_stats()["allocated_bytes.all.current"],
                  lambda: torch.tpu.memory_allocated(),
                  lambda: torch.accelerator.get_memory_info()[1] - torch.accelerator.get_memory_info()[0]):
        torch_tpu.debug.clear_program_cache()  # every op below is cold
        _settled()
        x = torch.randn(331, 7).to("tpu")
        base = torch.tpu.memory_allocated()
        torch.accelerator.reset_peak_memory_stats()
        with torch_tpu.debug.pipelined_compile(True):
            y = (x * 2.5).exp()
            z = y + 1
            del y
            assert torch_tpu._C._pending_nodes() == 3  # recorded, not run: the query must run them
            used = query()
            assert torch_tpu._C._pending_nodes() == 0
        assert used == base + n, (used, base)  # z: y is freed, x * 2.5 was a temporary
        # Counted from the reset on: the recorded ops ran after it (a dead temporary's
        # buffer is reused by the next op).
        assert torch.accelerator.max_memory_allocated() >= base + n
        torch.testing.assert_close(z.cpu(), (x.cpu() * 2.5).exp() + 1)
        del x, z

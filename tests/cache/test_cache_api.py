"""torch_tpu.cache in one process: stats, clear, configure, least-recently-used
eviction under the size bound."""
import os

import pytest
import torch
import torch_tpu

from conftest import assert_close_cpu


@pytest.fixture
def private_cache(tmp_path):
    """Points the persistent cache at an empty directory, with an empty in-memory
    cache so that programs come from disk or XLA; restores the session's afterwards."""
    before = torch_tpu.cache.stats()
    torch_tpu.cache.configure(tmp_path, enabled=True)
    torch_tpu.cache.clear(memory=True, disk=False)
    yield tmp_path
    torch_tpu.cache.configure(before["dir"], before["max_bytes"], before["enabled"])


def files(d):
    return {n for n in os.listdir(d) if n.endswith(".xpe")}


def run_program(n):
    """A program of its own (its shape is part of the key); checks its result."""
    x = torch.arange(n, dtype=torch.float32)
    assert_close_cpu(x.to("tpu") * 3 - 1, x * 3 - 1)


def test_stats_count_memory_and_disk(private_cache):
    s0 = torch_tpu.cache.stats()
    for key in ("memory_hits", "memory_misses", "memory_entries", "disk_hits", "disk_misses",
                "disk_writes", "disk_bytes_read", "disk_bytes_written", "disk_entries",
                "disk_bytes", "compiles", "compile_seconds", "enabled", "dir", "max_bytes"):
        assert key in s0, key
    assert s0["dir"] == str(private_cache) and s0["disk_entries"] == 0

    run_program(1001)
    s1 = torch_tpu.cache.stats()
    assert s1["compiles"] > s0["compiles"]
    assert s1["disk_writes"] - s0["disk_writes"] == s1["compiles"] - s0["compiles"]
    assert s1["disk_entries"] == len(files(private_cache)) > 0
    assert s1["disk_bytes"] == sum(os.path.getsize(private_cache / f) for f in files(private_cache))

    run_program(1001)                                 # memory hit: disk untouched
    s2 = torch_tpu.cache.stats()
    assert s2["memory_hits"] > s1["memory_hits"]
    assert s2["compiles"] == s1["compiles"] and s2["disk_hits"] == s1["disk_hits"]

    torch_tpu.cache.clear(memory=True, disk=False)   # as a new process would: from disk
    assert torch_tpu.cache.stats()["memory_entries"] == 0
    run_program(1001)
    s3 = torch_tpu.cache.stats()
    assert s3["compiles"] == s2["compiles"]
    assert s3["disk_hits"] - s2["disk_hits"] == s1["compiles"] - s0["compiles"]


def test_clear_removes_disk_entries(private_cache):
    run_program(1002)
    n = len(files(private_cache))
    assert n > 0
    assert torch_tpu.cache.clear() == n
    assert files(private_cache) == set()
    s = torch_tpu.cache.stats()
    assert s["disk_entries"] == 0 and s["memory_entries"] == 0
    compiles = s["compiles"]
    run_program(1002)                                 # nothing left: compiles again
    assert torch_tpu.cache.stats()["compiles"] > compiles


def test_disabled_cache_neither_reads_nor_writes(private_cache):
    run_program(1003)
    torch_tpu.cache.configure(enabled=False)
    assert not torch_tpu.cache.enabled()
    torch_tpu.cache.clear(memory=True, disk=False)
    s0 = torch_tpu.cache.stats()
    run_program(1003)
    run_program(1004)
    s1 = torch_tpu.cache.stats()
    assert s1["disk_hits"] == s0["disk_hits"] and s1["disk_writes"] == s0["disk_writes"]
    assert s1["compiles"] > s0["compiles"]


def test_least_recently_used_entries_are_evicted_first(private_cache):
    new = []
    for n in (1011, 1012, 1013, 1014):
        before = files(private_cache)
        run_program(n)
        new.append(files(private_cache) - before)
    assert all(new)
    # Make the ages unambiguous (file times have coarse resolution on some disks):
    # 1011's programs are the oldest, then 1012, 1013, 1014.
    for age, group in enumerate(new):
        for f in group:
            os.utime(private_cache / f, (1_000_000 + age, 1_000_000 + age))
    # Using 1011 again (from disk) makes it the most recently used.
    torch_tpu.cache.clear(memory=True, disk=False)
    run_program(1011)
    sizes = {f: os.path.getsize(private_cache / f) for f in files(private_cache)}
    total = sum(sizes.values())
    # A bound just under the current total: the next store must evict, and the
    # oldest (1012's programs) go first.
    torch_tpu.cache.configure(max_bytes=total - 1)
    evictions = torch_tpu.cache.stats()["disk_evictions"]
    run_program(1015)
    left = files(private_cache)
    assert torch_tpu.cache.stats()["disk_evictions"] > evictions
    assert sum(os.path.getsize(private_cache / f) for f in left) <= total - 1
    assert new[0] <= left, "the entry used last was evicted"
    assert not (new[1] & left), "the least recently used entry survived"

"""The persistent compile cache across processes: warm starts compile nothing; bad
entries, unwritable and full directories degrade with one warning, never a crash or
a wrong result; concurrent processes share one directory."""
import json
import os
import struct
import subprocess
import sys

import pytest
import torch

from cache_child import CHILD, entries, expected_values, run_child

BAD_ENTRY = "bad compile-cache entry"
CANNOT_WRITE = "cannot write the compile cache"


def check_values(result):
    assert result["values"] == pytest.approx(expected_values(), rel=1e-6)


def test_warm_process_compiles_nothing(tmp_path):
    cold, _ = run_child(tmp_path)
    check_values(cold)
    s = cold["stats"]
    assert s["enabled"] and s["dir"] == str(tmp_path)
    assert s["compiles"] >= 4 and s["disk_hits"] == 0
    assert s["disk_writes"] == s["compiles"] == len(entries(tmp_path))
    assert s["disk_bytes_written"] == s["disk_bytes"] > 0

    warm, stderr = run_child(tmp_path)
    check_values(warm)
    w = warm["stats"]
    assert w["compiles"] == 0
    assert w["disk_hits"] == s["compiles"] and w["disk_misses"] == 0
    assert w["disk_writes"] == 0 and w["disk_bytes_read"] > 0
    assert BAD_ENTRY not in stderr and CANNOT_WRITE not in stderr


def test_other_xla_flags_miss_the_cache(tmp_path):
    # XLA_FLAGS change what the compiler emits (XLA reads them once per process), so
    # entries compiled under one setting must not be served under another; the same
    # setting again is a warm start.
    flags = {"XLA_FLAGS": "--xla_cpu_enable_fast_min_max=false"}
    cold, _ = run_child(tmp_path)
    other, _ = run_child(tmp_path, env=flags)
    check_values(other)
    o = other["stats"]
    assert o["compiles"] == cold["stats"]["compiles"] and o["disk_hits"] == 0
    again, _ = run_child(tmp_path, env=flags)
    assert again["stats"]["compiles"] == 0 and again["stats"]["disk_hits"] == o["compiles"]


def _corrupt(path, how):
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":        # one payload byte: only the checksum can tell
        data = data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:]
    elif how == "foreign":        # a future or past entry format
        data = data[:8] + struct.pack("<I", 999) + data[12:]
    elif how == "garbage":
        data = b"not an executable at all"
    elif how == "empty":
        data = b""
    with open(path, "wb") as f:
        f.write(data)


def test_corrupt_entries_are_recompiled_and_replaced_with_one_warning(tmp_path):
    cold, _ = run_child(tmp_path)
    names = entries(tmp_path)
    kinds = ["truncated", "flipped", "foreign", "garbage", "empty"]
    for name, how in zip(names, kinds):
        _corrupt(tmp_path / name, how)
    broken = min(len(names), len(kinds))

    again, stderr = run_child(tmp_path)
    check_values(again)
    s = again["stats"]
    assert s["disk_bad_entries"] == broken
    assert s["compiles"] == broken
    assert s["disk_writes"] == broken             # replaced
    assert stderr.count(BAD_ENTRY) == 1, stderr[-3000:]

    healed, stderr = run_child(tmp_path)
    check_values(healed)
    assert healed["stats"]["compiles"] == 0
    assert healed["stats"]["disk_bad_entries"] == 0
    assert BAD_ENTRY not in stderr


def test_unreadable_entries_are_recompiled_and_replaced(tmp_path):
    run_child(tmp_path)
    names = entries(tmp_path)
    for name in names:
        os.chmod(tmp_path / name, 0)

    again, stderr = run_child(tmp_path, honour_permissions=True)
    check_values(again)
    s = again["stats"]
    assert s["disk_bad_entries"] == len(names) == s["compiles"]
    assert stderr.count(BAD_ENTRY) == 1 and "Permission denied" in stderr
    # The replacement is an ordinary, readable file again.
    assert all(os.stat(tmp_path / n).st_mode & 0o444 for n in names)
    assert run_child(tmp_path, honour_permissions=True)[0]["stats"]["compiles"] == 0


def test_read_only_directory_degrades_to_memory_with_one_warning(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    os.chmod(ro, 0o555)
    try:
        # Pipelined compiles (on by default) store from pool threads at once: the
        # cache counts the first failure only, however they interleave.
        result, stderr = run_child(ro, honour_permissions=True)
        check_values(result)
        s = result["stats"]
        assert s["compiles"] >= 4 and s["disk_writes"] == 0
        assert s["disk_write_failures"] == 1          # later stores are skipped
        assert stderr.count(CANNOT_WRITE) == 1, stderr[-3000:]
        assert entries(ro) == []
    finally:
        os.chmod(ro, 0o755)


def test_read_only_directory_with_entries_still_serves_them(tmp_path):
    run_child(tmp_path)
    os.chmod(tmp_path, 0o555)
    try:
        result, stderr = run_child(tmp_path, honour_permissions=True)
    finally:
        os.chmod(tmp_path, 0o755)
    check_values(result)
    assert result["stats"]["compiles"] == 0 and result["stats"]["disk_hits"] >= 4
    assert CANNOT_WRITE not in stderr and BAD_ENTRY not in stderr


def test_uncreatable_directory_degrades_to_memory(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    result, stderr = run_child(blocker / "cache")
    check_values(result)
    assert result["stats"]["disk_write_failures"] == 1
    assert stderr.count(CANNOT_WRITE) == 1


# Eight threads compile distinct programs at once, so that several stores fail
# together: the failure is still counted and warned about once.
CONCURRENT_OPS = ["x.sin()", "x.exp()", "x.cumsum(0)", "x.softmax(1)", "x.t().matmul(x)",
                  "x.amax(0)", "x.sqrt()", "torch.tanh(x).sum(1)"]
CONCURRENT_STORES = r'''
import json, threading, torch, torch_tpu
x = torch.arange(12, dtype=torch.float32).reshape(3, 4).to("tpu")
ops = %r
values = [None] * len(ops)
def work(i):
    values[i] = eval(ops[i]).cpu().tolist()
threads = [threading.Thread(target=work, args=(i,)) for i in range(len(ops))]
for t in threads: t.start()
for t in threads: t.join()
print("RESULT " + json.dumps({"values": values, "stats": torch_tpu.cache.stats()}))
''' % (CONCURRENT_OPS,)


def test_concurrent_failing_stores_count_one_failure(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    result, stderr = run_child(blocker / "cache", code=CONCURRENT_STORES)
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    for got, op in zip(result["values"], CONCURRENT_OPS):
        torch.testing.assert_close(torch.tensor(got), eval(op))
    assert result["stats"]["compiles"] >= len(CONCURRENT_OPS)
    assert result["stats"]["disk_write_failures"] == 1
    assert stderr.count(CANNOT_WRITE) == 1


def test_full_disk_degrades_to_memory_with_one_warning(tmp_path):
    result, stderr = run_child(tmp_path, max_file_bytes=512)
    check_values(result)
    s = result["stats"]
    assert s["disk_writes"] == 0 and s["disk_write_failures"] == 1
    assert stderr.count(CANNOT_WRITE) == 1, stderr[-3000:]
    # No partial file is left behind, under its name or a temporary one.
    assert os.listdir(tmp_path) == []


def test_opt_out_writes_nothing(tmp_path):
    result, _ = run_child(tmp_path, env={"TORCH_TPU_CACHE": "0"})
    check_values(result)
    s = result["stats"]
    assert not s["enabled"]
    assert s["disk_hits"] == s["disk_misses"] == s["disk_writes"] == 0
    assert os.listdir(tmp_path) == []


def test_max_bytes_from_environment(tmp_path):
    result, _ = run_child(tmp_path, env={"TORCH_TPU_CACHE_MAX_BYTES": "3M"})
    assert result["stats"]["max_bytes"] == 3 << 20
    result, _ = run_child(tmp_path, env={"TORCH_TPU_CACHE_MAX_BYTES": "123456"})
    assert result["stats"]["max_bytes"] == 123456


# Each process repeatedly empties the shared directory and runs the programs again,
# so that one process's reads overlap the other's deletes and writes of the same
# keys: a torn read would show up as a bad entry.
RACER = CHILD + r'''
for i in range(25):
    torch_tpu.cache.clear(memory=True, disk=(i % 3 == 0))
    y = torch.arange(12, dtype=torch.float32).reshape(3, 4).to("tpu")
    got = [(y + 1).sum().item(), (y * y).mean().item(), torch.relu(y - 5).amax().item(),
           y.t().matmul(y).trace().item()]
    assert got == values, (got, values)
print("RESULT " + json.dumps({"values": values, "stats": torch_tpu.cache.stats()}))
'''


def test_two_processes_share_one_directory(tmp_path):
    env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", RACER], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, out[-2000:] + err[-4000:]
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for out in outs:
        result = json.loads([ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1][7:])
        check_values(result)
        assert result["stats"]["disk_bad_entries"] == 0
        assert result["stats"]["disk_hits"] > 0
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
    warm, _ = run_child(tmp_path)
    assert warm["stats"]["compiles"] == 0

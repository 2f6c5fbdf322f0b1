"""On the CPU plugin device memory is the process heap: freed memory is kept for reuse
(csrc/engine/host_heap.h), so a loop whose buffers are larger than glibc's mmap
threshold does not fault their pages in again on every iteration."""
from conftest import run_python

# 48 MiB buffers: above glibc's largest mmap threshold (32 MiB), so by default each one
# is a fresh mmap that its first writes fault in page by page (12,288 pages of 4 KiB).
LOOP = """
    import resource, torch, torch_tpu
    x = torch.ones(12 * 1024 * 1024, device="tpu")
    def run():
        y = x * 2
        torch.tpu.synchronize()
        return y[-1].item()
    faults = []
    for _ in range(15):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        assert run() == 2.0
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    # The median iteration: each of the plugin's threads that allocates keeps its own
    # heap, and faults it in once, the first time it gets a buffer this large.
    faults = sorted(faults)[len(faults) // 2]
    print("KEPT", torch_tpu._C._host_memory_kept())
    print("FAULTS", faults)
    torch.tpu.empty_cache()   # gives the kept memory back; the device still works
    print("AFTER", (x * 3)[:2].cpu().tolist())
"""

PAGES = 12 * 1024 * 1024 * 4 // 4096


def _faults(env):
    r = run_python(LOOP, env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(l.split(" ", 1) for l in r.stdout.splitlines() if l.split(" ", 1)[0] in
                 ("KEPT", "FAULTS", "AFTER"))
    assert lines["AFTER"] == "[3.0, 3.0]"
    return lines["KEPT"] == "True", float(lines["FAULTS"])


def test_freed_device_memory_is_reused_without_page_faults():
    kept, faults = _faults({"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "1"})
    assert kept
    assert faults < PAGES / 8, f"{faults} page faults in the median iteration with the heap kept"


def test_turned_off_the_pages_are_faulted_in_every_iteration():
    # The measurement above is real: without the setting every iteration faults its
    # 48 MiB buffer in again.
    kept, faults = _faults({"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "0"})
    assert not kept
    assert faults > PAGES / 2, f"only {faults} page faults in the median iteration with the heap not kept"


def test_the_users_own_malloc_tuning_wins():
    kept, _ = _faults({"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "1", "MALLOC_ARENA_MAX_": "4"})
    assert not kept


def test_bad_setting_is_a_clear_error():
    r = run_python("import torch_tpu", env={"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "yes"})
    assert r.returncode != 0
    assert "TORCH_TPU_CPU_KEEP_FREED_MEMORY must be 0 or 1" in r.stderr

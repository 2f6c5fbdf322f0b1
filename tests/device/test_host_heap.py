"""On the CPU plugin device memory is the process heap: freed memory is kept for reuse
(csrc/engine/host_heap.h), so a loop whose buffers are larger than glibc's mmap
threshold does not fault their pages in again on every iteration."""
import os

from conftest import run_python

# 48 MiB buffers: above glibc's largest mmap threshold (32 MiB), so by default each one
# is a fresh mmap that its first writes fault in page by page (12,288 pages of 4 KiB).
PAGES = 12 * 1024 * 1024 * 4 // 4096
ITERATIONS = 60
# glibc's malloc keeps one arena per thread, up to 8 per core on 64-bit systems.
ARENAS = 8 * os.cpu_count()

# Each arena that serves the buffer faults it in the first time it gets a block this
# large, and keeps it afterwards. Which thread (and so which arena) allocates an
# iteration's result, and when the previous result's buffer is released (an arena
# holding two at once faults in a second block), is the scheduler's choice: on a
# loaded machine with the plugin's and the compile pool's threads, 21 of 59
# iterations faulted (16 threads, 16 arenas). So the claim is measured as a share,
# not per arena: at most half the iterations fault a whole buffer in, where with the
# memory not kept every one does (the next test).
LOOP = f"""
    import os, resource, torch, torch_tpu
    x = torch.ones(12 * 1024 * 1024, device="tpu")
    def run():
        y = x * 2
        torch.tpu.synchronize()
        return y[-1].item()
    faults, threads = [], 0
    for _ in range({ITERATIONS}):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        assert run() == 2.0
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        threads = max(threads, len(os.listdir("/proc/self/task")))
    print("KEPT", torch_tpu._C._host_memory_kept())
    print("FAULTING", sum(f > {PAGES} // 2 for f in faults[1:]))  # the first also makes x
    print("THREADS", threads)  # for the failure message
    torch.tpu.empty_cache()   # gives the kept memory back; the device still works
    print("AFTER", (x * 3)[:2].cpu().tolist())
"""


def _faults(env):
    r = run_python(LOOP, env=env)
    assert r.returncode == 0, r.stderr
    lines = dict(l.split(" ", 1) for l in r.stdout.splitlines() if l.split(" ", 1)[0] in
                 ("KEPT", "FAULTING", "THREADS", "AFTER"))
    assert lines["AFTER"] == "[3.0, 3.0]"
    return lines["KEPT"] == "True", int(lines["FAULTING"]), int(lines["THREADS"])


def test_freed_device_memory_is_reused_without_page_faults():
    kept, faulting, threads = _faults({"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "1"})
    assert kept
    assert faulting <= (ITERATIONS - 1) // 2, (
        f"{faulting} of {ITERATIONS - 1} iterations faulted their buffer in "
        f"({threads} threads, at most {ARENAS} arenas)")


def test_turned_off_the_pages_are_faulted_in_every_iteration():
    # The measurement above is real: without the setting every iteration faults its
    # 48 MiB buffer in again.
    kept, faulting, _ = _faults({"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "0"})
    assert not kept
    assert faulting == ITERATIONS - 1, f"only {faulting} of {ITERATIONS - 1} iterations faulted"


def test_the_users_own_malloc_tuning_wins():
    kept, _, _ = _faults({"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "1", "MALLOC_ARENA_MAX_": "4"})
    assert not kept


def test_bad_setting_is_a_clear_error():
    r = run_python("import torch_tpu", env={"TORCH_TPU_CPU_KEEP_FREED_MEMORY": "maybe"})
    assert r.returncode != 0
    assert "TORCH_TPU_CPU_KEEP_FREED_MEMORY must be 0 or 1" in r.stderr

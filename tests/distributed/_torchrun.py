"""Launching a worker script under torchrun on loopback, from pytest, never hanging.

`python -m torch.distributed.run --standalone` picks a free rendezvous port
itself, so concurrent launches never collide; the whole process tree is
killed if it outlives `timeout`.
"""
import os
import signal
import subprocess
import sys
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


TAG_VAR = "TORCHRUN_HARNESS_TAG"  # not a TORCH_TPU_ setting: the tests own it


def kill_tagged(tag):
    """SIGKILLs every process started with TAG_VAR=tag in its environment. torchrun's
    agent starts each worker in a session of its own, so killing torchrun's process
    group leaves a hung worker running, and it holds the output pipe open: a fresh-clone
    run under load waited on such a worker for 20 minutes."""
    marker = f"{TAG_VAR}={tag}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                tagged = marker in f.read().split(b"\0")
        except OSError:  # gone, or not ours to read
            continue
        if tagged:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass


def torchrun(script, nproc=2, args=(), mode="strict_eager", env=None, timeout=300, max_restarts=0):
    """Runs `script` (a path, or a name under tests/distributed/workers) on `nproc`
    processes; returns (returncode, combined output)."""
    if not os.path.isabs(script):
        script = os.path.join(HERE, "workers", script)
    full_env = dict(os.environ)
    full_env.update({"TORCH_TPU_EXECUTION_MODE": mode, "OMP_NUM_THREADS": "1",
                     "PYTHONPATH": os.pathsep.join([ROOT, full_env.get("PYTHONPATH", "")])})
    full_env.update(env or {})
    tag = full_env[TAG_VAR] = uuid.uuid4().hex
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", f"--max-restarts={max_restarts}", "--monitor-interval=0.5",
           script, *map(str, args)]
    p = subprocess.Popen(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        kill_tagged(tag)  # the workers, each in its own session
        out, _ = p.communicate(timeout=60)
        pytest.fail(f"torchrun {os.path.basename(script)} did not finish within {timeout}s "
                    f"(hang):\n{out[-6000:]}")
    return p.returncode, out


def assert_ok(rc, out, expect_lines=()):
    assert rc == 0, f"torchrun failed (rc={rc}):\n{out[-8000:]}"
    for line in expect_lines:
        assert line in out, f"missing {line!r} in:\n{out[-8000:]}"

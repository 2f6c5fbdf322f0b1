"""Runs a fixed set of small programs in a fresh interpreter and reports the compile
cache's view of it: the helper the tests in this directory share."""
import ctypes
import json
import os
import resource
import subprocess
import sys

import pytest
import torch

# A handful of distinct programs, so that a cache directory holds several entries.
CHILD = r'''
import json, torch, torch_tpu
x = torch.arange(12, dtype=torch.float32).reshape(3, 4).to("tpu")
values = [(x + 1).sum().item(), (x * x).mean().item(), torch.relu(x - 5).amax().item(),
          x.t().matmul(x).trace().item()]
print("RESULT " + json.dumps({"values": values, "stats": torch_tpu.cache.stats()}))
'''


def expected_values():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return [(x + 1).sum().item(), (x * x).mean().item(), torch.relu(x - 5).amax().item(),
            x.t().matmul(x).trace().item()]


def _drop_file_permission_override():
    # As root, permission bits do not apply (CAP_DAC_OVERRIDE): drop the capabilities
    # from the bounding set so that the exec'd interpreter honours them, as a normal
    # user's process would. PR_CAPBSET_DROP = 24; CAP_DAC_OVERRIDE = 1,
    # CAP_DAC_READ_SEARCH = 2, CAP_FOWNER = 3.
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_child(cache_dir, code=CHILD, env=None, honour_permissions=False, max_file_bytes=None,
              timeout=600):
    """Runs `code` with TORCH_TPU_CACHE_DIR=cache_dir; returns (result dict, stderr)."""
    full_env = dict(os.environ, TORCH_TPU_CACHE_DIR=str(cache_dir))
    full_env.update(env or {})

    def preexec():
        if honour_permissions and os.geteuid() == 0:
            _drop_file_permission_override()
        if max_file_bytes is not None:
            # Python ignores SIGXFSZ, so an oversized write fails with EFBIG:
            # what a full disk looks like to the writer.
            resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    try:
        r = subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                           text=True, timeout=timeout, preexec_fn=preexec)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"child did not finish within {timeout}s: {e}")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):]), r.stderr


def entries(cache_dir):
    return sorted(p for p in os.listdir(cache_dir) if p.endswith(".xpe"))

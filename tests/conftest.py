"""Shared helpers for the Python test suite: compare tpu results with PyTorch's CPU backend."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

# The suite never writes to the user's compile cache (~/.cache/torch_tpu): it gets a
# private one for the session, shared with its subprocesses through the environment.
# Set before torch is imported: importing torch loads torch_tpu (autoload), which
# reads the variable.
_session_cache = tempfile.mkdtemp(prefix="torch_tpu_test_cache_")
os.environ["TORCH_TPU_CACHE_DIR"] = _session_cache
atexit.register(shutil.rmtree, _session_cache, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402
import torch_tpu  # noqa: F401,E402  (registers the device)

TPU = torch.device("tpu")

# The serving tests' fixtures (tests/vllm_serving), as a plugin rather than a conftest.py
# of that folder: a second conftest.py would shadow this module for `from conftest import
# ...` in a run that collects both. It imports vLLM only inside its fixtures.
pytest_plugins = ["vllm_serving.serving_fixtures"]

# float32 programs compiled by XLA may fuse and reorder; allow a few ulps more than CPU-vs-CPU.
_TOL = {
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
}


def assert_close_cpu(tpu_tensor, cpu_tensor, **kw):
    """Asserts that a tpu tensor equals a CPU reference: device, dtype, shape and values."""
    assert isinstance(tpu_tensor, torch.Tensor)
    assert tpu_tensor.device.type == "tpu", f"expected a tpu tensor, got {tpu_tensor.device}"
    assert tpu_tensor.dtype == cpu_tensor.dtype, (tpu_tensor.dtype, cpu_tensor.dtype)
    assert tpu_tensor.shape == cpu_tensor.shape, (tpu_tensor.shape, cpu_tensor.shape)
    tol = dict(_TOL.get(cpu_tensor.dtype, dict(rtol=0, atol=0)))
    tol.update(kw)
    torch.testing.assert_close(tpu_tensor.cpu(), cpu_tensor, **tol)


# How long a child process or a waiting thread may take before a test calls it hung.
# Generous on purpose: it only has to catch a real hang, and on a loaded CI machine (two
# test runs at once on two cores) a child that takes 10 s on a quiet one takes minutes.
HANG_SECONDS = 600


def run_python(code, env=None, timeout=HANG_SECONDS):
    """Runs `code` in a fresh interpreter (sys.executable); returns the CompletedProcess.

    Never hangs the suite: a child that does not finish within `timeout` fails the test.
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"subprocess did not finish within {timeout}s (hang): {e}")


# Suites whose tests run in both execution modes (results must agree up to
# floating-point reassociation); a test marked strict_only runs in Strict Eager alone.
_BOTH_MODES = ("ops", "models", "modes", "amp")


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", default=False,
                     help="also run the tests marked slow (over ~30 s each)")


def pytest_collection_modifyitems(config, items):
    """Tests marked slow are deselected unless --slow is given or -m names a marker."""
    if config.getoption("--slow") or config.getoption("-m"):
        return
    keep = [i for i in items if not i.get_closest_marker("slow")]
    dropped = [i for i in items if i.get_closest_marker("slow")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_configure(config):
    config.addinivalue_line("markers", "strict_only: runs only in Strict Eager")
    config.addinivalue_line("markers", "slow: over ~30 s each; deselected unless --slow or -m selects them")


@pytest.fixture(autouse=True)
def tpu_execution_mode(request):
    """The execution mode of the test (Strict Eager unless parametrised)."""
    mode = getattr(request, "param", "strict_eager")
    torch_tpu.set_execution_mode(mode)
    yield mode
    torch_tpu.set_execution_mode("strict_eager")  # runs pending work first


def pytest_generate_tests(metafunc):
    parts = str(metafunc.definition.path).split(os.sep)
    if ("tpu_execution_mode" in metafunc.fixturenames and "tests" in parts
            and parts[parts.index("tests") + 1] in _BOTH_MODES
            and not metafunc.definition.get_closest_marker("strict_only")):
        metafunc.parametrize("tpu_execution_mode", ["strict_eager", "defer_and_fuse"],
                             indirect=True, ids=["eager", "fused"])


@pytest.fixture
def metrics_delta():
    """Returns a function giving the change of torch_tpu.debug.metrics() since the test began."""
    before = torch_tpu.debug.metrics()

    def delta(key):
        return torch_tpu.debug.metrics()[key] - before[key]
    return delta


@pytest.fixture(autouse=True)
def fresh_dynamo(request):
    """tests/compile: each test starts with Dynamo's caches empty, in Strict Eager, with
    no records of earlier compiled graphs, so tests neither share compiled frames nor
    hit Dynamo's recompile limit because of one another. (Kept here: a second
    conftest.py would shadow this module for `from conftest import ...`.)"""
    parts = str(request.node.path).split(os.sep)
    if "tests" not in parts or parts[parts.index("tests") + 1] != "compile":
        yield
        return
    torch._dynamo.reset()
    torch_tpu.set_execution_mode("strict_eager")
    torch_tpu.debug.reset_compiled_graphs()
    yield
    torch._dynamo.reset()
    torch_tpu.set_execution_mode("strict_eager")

"""The smoke suite against a torch release other than the default one (2.14.1, the
release vLLM 0.33+ and SGLang pin): scripts/build_matrix.sh makes its environment under
.matrix/ (about 5 GB while it runs, deleted afterwards), builds the extension against it,
packs and installs the wheel and runs tests/compat/smoke_suite.py there. Tens of minutes
on a loaded 2-core machine. `bash scripts/build_matrix.sh` runs every release."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OTHER = "2.14.1"


def _torch_wheel_reachable(version):
    """Whether pip finds torch==version: with the machine's pip configuration (local
    wheels), else on PyPI alone (as build_matrix.sh tries). Resolves without downloading
    the wheel."""
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-deps",
           "--ignore-installed", "--disable-pip-version-check", f"torch=={version}"]
    for env in ({}, {"PIP_CONFIG_FILE": os.devnull}):
        try:
            r = subprocess.run(cmd, env={**os.environ, **env}, capture_output=True, timeout=300)
        except subprocess.TimeoutExpired:
            continue
        if r.returncode == 0:
            return True
    return False


@pytest.mark.slow
def test_smoke_suite_on_another_torch_release():
    if not _torch_wheel_reachable(OTHER):
        pytest.skip(f"torch=={OTHER} is neither among this machine's wheels nor reachable on "
                    f"PyPI (no network?): cannot make its environment")
    r = subprocess.run(["bash", "scripts/build_matrix.sh", OTHER], cwd=ROOT, capture_output=True,
                       text=True, timeout=4 * 3600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    row = [line for line in r.stdout.splitlines() if line.startswith(f"| {OTHER} |")]
    assert row and " passed" in row[0] and "failed" not in row[0], r.stdout[-4000:]

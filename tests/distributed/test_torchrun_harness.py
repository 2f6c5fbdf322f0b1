"""The torchrun harness never hangs: a worker left running in its own session, holding
the output pipe, is killed at the timeout and the test fails with the output."""
import os
import time

import pytest

from _torchrun import torchrun


def test_a_worker_left_holding_the_output_is_killed_at_the_timeout(tmp_path):
    pid_file = tmp_path / "orphan.pid"
    t0 = time.monotonic()
    # 60 s: long enough for torchrun to start its workers on a loaded machine (the
    # orphan must exist before the timeout for the test to say anything).
    with pytest.raises(pytest.fail.Exception, match="did not finish within 60s"):
        torchrun("orphan_holds_output.py", nproc=2, args=[pid_file], timeout=60)
    assert time.monotonic() - t0 < 160
    pid = int(pid_file.read_text())
    for _ in range(50):  # killed; init reaps it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the orphan {pid} is still running")

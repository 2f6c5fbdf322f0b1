"""The compile cache is safe to share a machine with: its directory is created 0700
and entries 0600; an entry owned by another user, or any entry in a directory others
can write, is never loaded (one clear warning; the program is compiled instead and
the results stay right)."""
import os
import stat

import pytest

from cache_child import entries, expected_values, run_child

UNSAFE = "not loading compiled programs from the compile cache"


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_directory_0700_and_entries_0600(tmp_path):
    d = tmp_path / "new" / "cache"
    cold, _ = run_child(d)
    assert cold["values"] == pytest.approx(expected_values(), rel=1e-6)
    assert _mode(d) == 0o700
    files = entries(d)
    assert files and all(_mode(d / f) == 0o600 for f in files)


def test_entry_owned_by_another_user_is_not_loaded(tmp_path):
    cold, _ = run_child(tmp_path)
    files = entries(tmp_path)
    os.chown(tmp_path / files[0], 12345, 12345)  # the tests run as root: any uid
    warm, stderr = run_child(tmp_path)
    assert warm["values"] == pytest.approx(expected_values(), rel=1e-6)
    assert UNSAFE in stderr and "owned by uid 12345" in stderr, stderr
    assert stderr.count(UNSAFE) == 1
    assert warm["stats"]["compiles"] >= 1  # that one program was compiled again
    assert warm["stats"]["disk_hits"] == len(files) - 1


def test_world_writable_directory_is_never_loaded(tmp_path):
    cold, _ = run_child(tmp_path)
    n = len(entries(tmp_path))
    os.chmod(tmp_path, 0o777)
    warm, stderr = run_child(tmp_path)
    assert warm["values"] == pytest.approx(expected_values(), rel=1e-6)
    assert UNSAFE in stderr and "writable by other users" in stderr, stderr
    assert stderr.count(UNSAFE) == 1
    assert warm["stats"]["disk_hits"] == 0 and warm["stats"]["compiles"] >= n


def test_directory_owned_by_another_user_is_never_loaded(tmp_path):
    run_child(tmp_path)
    os.chown(tmp_path, 12345, 12345)
    warm, stderr = run_child(tmp_path)
    assert warm["values"] == pytest.approx(expected_values(), rel=1e-6)
    assert UNSAFE in stderr and warm["stats"]["disk_hits"] == 0

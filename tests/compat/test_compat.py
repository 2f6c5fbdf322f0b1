"""Which torch releases torch_tpu accepts, and how it finds the extension built for the
installed one (torch_tpu/_compat.py): a wheel's per-release extension, else the in-place build."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest
import torch

import torch_tpu
from conftest import HANG_SECONDS, run_python
from torch_tpu import _compat

NO_AUTOLOAD = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


@pytest.mark.parametrize("version,release", [("2.13.0+cpu", (2, 13)), ("2.14.1+cu130", (2, 14)),
                                             ("2.15.0a0+git1234", (2, 15)), ("2.11.0", (2, 11))])
def test_release(version, release):
    assert _compat.release(version) == release


@pytest.mark.parametrize("version", ["2.11.0", "2.12.1", "2.13.0+cpu", "2.14.1+cu130", "2.15.0"])
def test_supported_releases_pass(version):
    _compat.check_supported(version)


@pytest.mark.parametrize("version", ["2.10.0", "2.16.0", "3.0.0", "1.13.1"])
def test_unsupported_release_names_the_range(version):
    with pytest.raises(ImportError, match=rf"torch_tpu supports torch 2\.11 to 2\.15; the "
                                          rf"installed torch is {version}"):
        _compat.check_supported(version)


def test_import_with_an_unsupported_torch_fails_clearly():
    # Simulates a torch outside the range: the version check runs before the extension loads.
    r = run_python("""
        import torch
        torch.__version__ = "2.16.0"
        try:
            import torch_tpu
        except ImportError as e:
            print("ImportError:", e)
    """, env=NO_AUTOLOAD)
    assert r.returncode == 0, r.stderr
    assert "ImportError: torch_tpu supports torch 2.11 to 2.15; the installed torch is 2.16.0" \
        in r.stdout


def test_wheel_layout_loads_the_extension_for_the_installed_release(tmp_path):
    # A copy of the package laid out as scripts/build_wheel.sh's wheel: no in-place
    # extension, one under _ext/torch_<major>_<minor>/ for the installed torch, and one
    # for another release that must be ignored.
    src = os.path.dirname(torch_tpu.__file__)
    pkg = tmp_path / "torch_tpu"
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("_C*.so", "__pycache__", "_ext"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    major, minor = _compat.release(torch.__version__)
    here = pkg / "_ext" / f"torch_{major}_{minor}"
    here.mkdir(parents=True)
    shutil.copyfile(torch_tpu._C.__file__, here / ("_C" + suffix))
    other = pkg / "_ext" / f"torch_{major}_{minor - 1}"
    other.mkdir()
    (other / ("_C" + suffix)).write_bytes(b"not an extension")
    code = ("import torch, torch_tpu; print(torch_tpu.__file__); print(torch_tpu._C.__file__); "
            "print((torch.arange(4, device='tpu') * 2).sum().item())")
    # From tmp_path, so that neither the checkout (the current directory) nor the
    # editable install shadows the copy.
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, **NO_AUTOLOAD, "PYTHONPATH": str(tmp_path)}, timeout=HANG_SECONDS)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.split()
    assert lines[0] == str(pkg / "__init__.py")
    assert lines[1] == str(here / ("_C" + suffix))
    assert lines[2] == "12"


def test_a_checkout_prefers_its_in_place_build_for_the_same_release(tmp_path):
    # A source checkout after build_wheel.sh: the in-place build (noted as made for this
    # release) wins over a stale _ext copy, so `cmake --build build/ext` takes effect.
    src = os.path.dirname(torch_tpu.__file__)
    pkg = tmp_path / "torch_tpu"
    shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__", "_ext"))
    (pkg / "_C.torch_version").write_text(torch.__version__ + "\n")
    major, minor = _compat.release(torch.__version__)
    stale = pkg / "_ext" / f"torch_{major}_{minor}"
    stale.mkdir(parents=True)
    (stale / ("_C" + sysconfig.get_config_var("EXT_SUFFIX"))).write_bytes(b"stale")
    code = "import torch_tpu; print(torch_tpu._C.__file__)"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, **NO_AUTOLOAD, "PYTHONPATH": str(tmp_path)}, timeout=HANG_SECONDS)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(pkg / ("_C" + sysconfig.get_config_var("EXT_SUFFIX")))


def test_sources_digest_follows_every_source(tmp_path, monkeypatch):
    # build_wheel.sh packs only extensions whose noted digest (scripts/cmake_ext.py) is the
    # checkout's: any edit, addition or rename under csrc/ or in CMakeLists.txt changes it.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "scripts"))
    try:
        import cmake_ext
    finally:
        sys.path.pop(0)
    (tmp_path / "csrc" / "lower").mkdir(parents=True)
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    (tmp_path / "csrc" / "lower" / "a.cc").write_text("int a;\n")
    monkeypatch.setattr(cmake_ext, "ROOT", str(tmp_path))
    seen = {cmake_ext.sources_digest()}
    assert cmake_ext.sources_digest() in seen  # stable
    for change in (lambda: (tmp_path / "csrc" / "lower" / "a.cc").write_text("int b;\n"),
                   lambda: (tmp_path / "csrc" / "lower" / "a.cc").rename(tmp_path / "csrc" / "a.cc"),
                   lambda: (tmp_path / "csrc" / "b.h").write_text(""),
                   lambda: (tmp_path / "CMakeLists.txt").write_text("project(y)\n")):
        change()
        digest = cmake_ext.sources_digest()
        assert digest not in seen
        seen.add(digest)


def test_a_remade_environment_with_the_same_headers_reuses_the_build(tmp_path):
    # build_matrix.sh deletes an environment after its release: remade with the same torch,
    # pip writes the headers anew (newer than the objects), and scripts/cmake_ext.py gives
    # them back their old time so that ninja rebuilds only what the sources changed;
    # different headers (another torch) keep their time and rebuild.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "scripts"))
    try:
        import cmake_ext
    finally:
        sys.path.pop(0)
    build, inc = tmp_path / "build", tmp_path / "env" / "include"
    build.mkdir()
    (inc / "c10").mkdir(parents=True)

    def make_env(text, mtime_ns):
        for name in ("a.h", "c10/b.h"):
            (inc / name).write_text(text + name)
            os.utime(inc / name, ns=(mtime_ns, mtime_ns))

    old, new = 1_000_000_000 * 10**9, 1_000_100_000 * 10**9
    make_env("torch 2.14.1 ", old)
    noted = cmake_ext.reuse_headers(str(build), [str(inc)])  # the first build: nothing noted
    assert os.stat(inc / "a.h").st_mtime_ns == old
    (build / cmake_ext.HEADERS_STAMP).write_text(json.dumps(noted))
    make_env("torch 2.14.1 ", new)  # deleted and remade: the same headers, written later
    cmake_ext.reuse_headers(str(build), [str(inc)])
    assert {os.stat(inc / n).st_mtime_ns for n in ("a.h", "c10/b.h")} == {old}
    make_env("torch 2.14.2 ", new)  # another torch: its headers keep their time
    cmake_ext.reuse_headers(str(build), [str(inc)])
    assert {os.stat(inc / n).st_mtime_ns for n in ("a.h", "c10/b.h")} == {new}

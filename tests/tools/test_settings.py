"""Settings in one place: every TORCH_TPU_* variable the sources name is declared in
torch_tpu/settings.py, nothing reads one around it, and the generated doc and C++ table
match the declarations."""
import os
import re

import pytest

from conftest import run_python
from torch_tpu import settings
from torch_tpu.tools import settings_doc

ROOT = settings_doc.ROOT
SOURCES = ("csrc", "torch_tpu", "scripts", "benchmarks", "examples", "tests", "setup.py",
           "_torch_tpu_autoload.py", "CMakeLists.txt")
SUFFIXES = (".py", ".cc", ".h", ".sh", ".txt", ".toml", ".inc")
NAME = re.compile(r"\bTORCH_TPU_[A-Z0-9_]*[A-Z0-9]\b")
# A read that bypasses the accessors: os.environ.get("TORCH_TPU_X"), getenv("TORCH_TPU_X"),
# env["TORCH_TPU_X"] not followed by an assignment.
DIRECT_READ = re.compile(r"""(?:environ\.get|getenv|env\.get)\(\s*["']TORCH_TPU_"""
                         r"""|environ\[["']TORCH_TPU_[A-Z0-9_]+["']\](?!\s*=[^=])""")
# Tests that set misspelt variables on purpose.
MADE_UP_NAMES = {os.path.join("tests", "tools", f) for f in ("test_settings.py", "test_env.py")}
ACCESSORS = {os.path.join("torch_tpu", "settings.py"), os.path.join("csrc", "core", "settings.cc"),
             os.path.join("tests", "tools", "test_settings.py")}


def _source_files():
    for top in SOURCES:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            yield top
            continue
        for d, dirs, files in os.walk(path):
            dirs[:] = [x for x in dirs if x not in ("__pycache__", "_ext")]
            for f in files:
                if f.endswith(SUFFIXES):
                    yield os.path.relpath(os.path.join(d, f), ROOT)


def _read(rel):
    with open(os.path.join(ROOT, rel), errors="replace") as f:
        return f.read()


def test_every_variable_the_sources_name_is_declared():
    undeclared = {}
    for rel in _source_files():
        if rel in MADE_UP_NAMES:
            continue
        for name in NAME.findall(_read(rel)):
            if name not in settings.BY_NAME and name not in settings.NOT_SETTINGS:
                undeclared.setdefault(name, rel)
    assert not undeclared, f"declare these in torch_tpu/settings.py: {undeclared}"


def test_no_reader_bypasses_the_accessors():
    bypass = []
    for rel in _source_files():
        if rel in ACCESSORS:
            continue
        for i, line in enumerate(_read(rel).splitlines(), 1):
            if DIRECT_READ.search(line):
                bypass.append(f"{rel}:{i}: {line.strip()}")
    assert not bypass, "read through torch_tpu.settings / tpu::settings:\n" + "\n".join(bypass)


def test_declarations_are_well_formed():
    assert len(settings.BY_NAME) == len(settings.SETTINGS), "a variable is declared twice"
    for s in settings.SETTINGS:
        assert s.type in settings.TYPES and s.scope in settings.SCOPES, s
        assert s.meaning.strip(), s
        assert (s.type == "choice") == bool(s.choices), s
        if s.default:  # the declared default parses as its type
            settings._parse(s, s.default)


def test_generated_doc_and_cxx_table_are_current():
    assert settings_doc.stale() == [], "run python -m torch_tpu.tools.settings_doc"


def test_typed_reads(monkeypatch):
    monkeypatch.delenv("TORCH_TPU_CPU_DEVICES", raising=False)
    assert settings.get("TORCH_TPU_CPU_DEVICES") == 1
    monkeypatch.setenv("TORCH_TPU_CPU_DEVICES", " 4 ")
    assert settings.get("TORCH_TPU_CPU_DEVICES") == 4
    monkeypatch.setenv("TORCH_TPU_CPU_DEVICES", "0")
    with pytest.raises(ValueError, match="TORCH_TPU_CPU_DEVICES must be a positive integer"):
        settings.get("TORCH_TPU_CPU_DEVICES")
    monkeypatch.setenv("TORCH_TPU_CACHE", "off")
    assert settings.get("TORCH_TPU_CACHE") is False
    monkeypatch.setenv("TORCH_TPU_LOG_LEVEL", "loud")
    with pytest.raises(ValueError, match="TORCH_TPU_LOG_LEVEL must be one of debug, info"):
        settings.get("TORCH_TPU_LOG_LEVEL")
    monkeypatch.delenv("TORCH_TPU_LAUNCH_BLOCKING", raising=False)
    monkeypatch.setenv("TPU_LAUNCH_BLOCKING", "1")  # the alias
    assert settings.get("TORCH_TPU_LAUNCH_BLOCKING") is True
    assert "TPU_LAUNCH_BLOCKING" in settings.in_effect()
    monkeypatch.setenv("TORCH_TPU_CACH_DIR", "/tmp")  # a typo
    assert settings.unknown_in_environment() == ["TORCH_TPU_CACH_DIR"]
    with pytest.raises(KeyError, match="not declared"):
        settings.get("TORCH_TPU_NO_SUCH_SETTING")


def test_a_malformed_cxx_setting_fails_the_import_naming_it():
    r = run_python("import torch_tpu", env={"TORCH_TPU_DIST_PIECE_MB": "lots"})
    assert r.returncode != 0
    assert "TORCH_TPU_DIST_PIECE_MB must be a number, got 'lots'" in r.stderr


def test_cxx_accessor_reads_the_environment():
    # TORCH_TPU_CHECKS is read by the C++ accessor (csrc/lower/checks.cc) at load.
    r = run_python("import torch_tpu; print(torch_tpu._C._device_checks_enabled())",
                   env={"TORCH_TPU_CHECKS": "off"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"

"""The torch releases torch_tpu supports, and loading the extension built for the installed one.

A wheel (scripts/build_wheel.sh) carries one extension per torch release, as
torch_tpu/_ext/torch_<major>_<minor>/_C<suffix>; a source checkout has the one it built
in place (torch_tpu/_C<suffix>, from `pip install --no-build-isolation -e .`). Either is
loaded as the module torch_tpu._C. Differences between torch releases stay here (Python),
in csrc/aten/torch_compat.h (C++) and in CMakeLists.txt (C++20 for torch >= 2.14, whose
headers need it); no other source tests the torch version.
"""
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig

# Inclusive: the oldest and the newest torch release (major, minor) torch_tpu builds against.
OLDEST = (2, 11)
NEWEST = (2, 15)

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def release(version):
    """(major, minor) of a torch version string such as '2.14.1+cu130' or '2.15.0a0+git...'."""
    parts = version.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ImportError(f"torch_tpu: cannot read the torch version {version!r}") from None


def supported_range():
    return f"torch {OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"


def check_supported(version):
    """Raises ImportError naming the supported range when `version` is outside it."""
    if not OLDEST <= release(version) <= NEWEST:
        raise ImportError(
            f"torch_tpu supports {supported_range()}; the installed torch is {version}. "
            f"Install a supported torch (e.g. pip install 'torch>={OLDEST[0]}.{OLDEST[1]},"
            f"<{NEWEST[0]}.{NEWEST[1] + 1}') or a torch_tpu release made for this one.")


def extension_dir(version):
    """Where a wheel keeps the extension built for `version`'s release."""
    major, minor = release(version)
    return os.path.join(_PACKAGE_DIR, "_ext", f"torch_{major}_{minor}")


def extension_path(version):
    """The extension file for `version`'s release in a wheel, or None."""
    path = os.path.join(extension_dir(version), "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
    return path if os.path.exists(path) else None


def built_releases():
    """The torch releases a wheel carries an extension for, e.g. ['2.11', '2.15']."""
    base = os.path.join(_PACKAGE_DIR, "_ext")
    names = sorted(os.listdir(base)) if os.path.isdir(base) else []
    return [n[len("torch_"):].replace("_", ".") for n in names if n.startswith("torch_")]


def _in_place_release():
    """The torch release the in-place build was made for (scripts/cmake_ext.py notes it),
    or None (also when there is no in-place build)."""
    if not os.path.exists(os.path.join(_PACKAGE_DIR, "_C" + sysconfig.get_config_var("EXT_SUFFIX"))):
        return None
    try:
        with open(os.path.join(_PACKAGE_DIR, "_C.torch_version")) as f:
            return release(f.read().strip())
    except (OSError, ImportError):
        return None


def load_extension(version):
    """Imports torch_tpu._C: the in-place build when it was made for `version`'s release
    (a source checkout), else a wheel's extension for that release, else the in-place
    build whatever it was made for (an error names the mismatch). Returns the module."""
    check_supported(version)
    path = extension_path(version)
    if path is None or _in_place_release() == release(version):
        try:
            return importlib.import_module("torch_tpu._C")
        except ImportError as e:
            carried = built_releases()
            hint = (f"this torch_tpu carries extensions for torch {', '.join(carried)}"
                    if carried else "rebuild it: pip install --no-build-isolation -e .")
            raise ImportError(f"torch_tpu: no extension for torch {version} ({hint}): {e}") from e
    loader = importlib.machinery.ExtensionFileLoader("torch_tpu._C", path)
    spec = importlib.util.spec_from_file_location("torch_tpu._C", path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules["torch_tpu._C"] = module
    try:
        loader.exec_module(module)
    except BaseException:
        del sys.modules["torch_tpu._C"]
        raise
    return module

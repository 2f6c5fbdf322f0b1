"""Builds torch_tpu._C with CMake + Ninja against the installed torch.

Install without build isolation so that the extension links the torch that is
installed (pip install --no-build-isolation -e .). The build folder (build/ext)
is kept, so rebuilding is incremental (and ccache speeds it up when present).
"""
import glob
import os
import shutil
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import cmake_ext  # noqa: E402  (the CMake driver, shared with build_wheel.sh / build_matrix.sh)

sys.path.pop(0)


# scripts/build_wheel.sh: the wheel carries the extensions it built, one per torch release
# (torch_tpu/_ext/torch_<major>_<minor>/), and torch_tpu/_compat.py loads the matching one.
WHEEL_EXTENSIONS = cmake_ext.settings().get("TORCH_TPU_WHEEL_EXTENSIONS")


def current_extensions():
    """The extensions under torch_tpu/_ext built from the checkout's sources (paths
    relative to torch_tpu/): one built from other sources (its _C.sources, noted by
    cmake_ext.py, differs) stays out, so that a wheel never mixes builds of different
    sources."""
    digest = cmake_ext.sources_digest()
    package = os.path.join(ROOT, "torch_tpu")
    found = []
    for d in sorted(glob.glob(os.path.join(package, "_ext", "torch_*"))):
        try:
            with open(os.path.join(d, "_C.sources")) as f:
                if f.read().strip() != digest:
                    continue
        except OSError:
            continue
        found += [os.path.relpath(p, package) for p in sorted(glob.glob(os.path.join(d, "_C*.so")))]
    return found


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # Built in-tree (torch_tpu/), so that `cmake --build build/ext` alone
        # refreshes an editable install; copied to where setuptools wants it.
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        out_dir = os.path.join(ROOT, "torch_tpu")
        if WHEEL_EXTENSIONS:
            return  # scripts/build_wheel.sh built one per torch release under torch_tpu/_ext
        if cmake_ext.settings().get("TORCH_TPU_EXT_PREBUILT"):
            # A second environment with the same torch (the serving venv, .venv-vllm)
            # reuses the extension that .venv built in-tree instead of rebuilding it.
            built = os.path.join(out_dir, os.path.basename(target))
            if not os.path.exists(built):
                raise RuntimeError(f"TORCH_TPU_EXT_PREBUILT=1 but {built} is not built yet")
            if os.path.abspath(built) != target:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(built, target)
            return
        cmake_ext.build(os.path.join(ROOT, "build", "ext"), out_dir)
        built = os.path.join(out_dir, os.path.basename(target))
        if os.path.abspath(built) != target:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(built, target)


setup(
    ext_modules=[Extension("torch_tpu._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    package_data={"torch_tpu": current_extensions()} if WHEEL_EXTENSIONS else {},
)

"""Builds torch_tpu._C with CMake + Ninja against the installed torch.

Install without build isolation so that the extension links the torch that is
installed (pip install --no-build-isolation -e .). The build folder (build/ext)
is kept, so rebuilding is incremental (and ccache speeds it up when present).
"""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def _pjrt_include():
    sys.path.insert(0, os.path.join(ROOT, "torch_tpu"))
    try:
        import _plugin_paths
        return _plugin_paths.pjrt_include_dir()
    finally:
        sys.path.pop(0)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        # Importing torch must not autoload the torch_tpu being rebuilt.
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
        import torch
        from torch.utils import cpp_extension

        # Built in-tree (torch_tpu/), so that `cmake --build build/ext` alone
        # refreshes an editable install; copied to where setuptools wants it.
        target = os.path.abspath(self.get_ext_fullpath(ext.name))
        out_dir = os.path.join(ROOT, "torch_tpu")
        if os.environ.get("TORCH_TPU_EXT_PREBUILT") == "1":
            # A second environment with the same torch (the serving venv, .venv-vllm)
            # reuses the extension that .venv built in-tree instead of rebuilding it.
            built = os.path.join(out_dir, os.path.basename(target))
            if not os.path.exists(built):
                raise RuntimeError(f"TORCH_TPU_EXT_PREBUILT=1 but {built} is not built yet")
            if os.path.abspath(built) != target:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(built, target)
            return
        build_dir = os.path.join(ROOT, "build", "ext")
        os.makedirs(build_dir, exist_ok=True)
        args = [
            "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
            f"-DPJRT_INCLUDE_DIR={_pjrt_include()}",
            "-DTORCH_INCLUDE_DIRS=" + ";".join(cpp_extension.include_paths()),
            f"-DTORCH_LIBRARY_DIR={os.path.join(os.path.dirname(torch.__file__), 'lib')}",
            f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            f"-DPYTHON_INCLUDE_DIR={sysconfig.get_paths()['include']}",
            f"-DEXT_OUTPUT_DIR={out_dir}",
            f"-DEXT_SUFFIX={sysconfig.get_config_var('EXT_SUFFIX')}",
            f"-DCMAKE_BUILD_TYPE={os.environ.get('TORCH_TPU_BUILD_TYPE', 'Release')}",
        ]
        subprocess.check_call(args, stdout=subprocess.DEVNULL)
        jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
        subprocess.check_call(["cmake", "--build", build_dir, "--", "-j", jobs])
        built = os.path.join(out_dir, os.path.basename(target))
        if os.path.abspath(built) != target:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copyfile(built, target)


setup(
    ext_modules=[Extension("torch_tpu._C", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
)

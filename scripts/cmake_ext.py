"""Configures and builds the extension torch_tpu._C with CMake + Ninja against the torch
of the interpreter that runs this (setup.py uses it; so do build_wheel.sh and
build_matrix.sh, once per torch release, each into its own build folder).

    python scripts/cmake_ext.py BUILD_DIR OUT_DIR     # writes OUT_DIR/_C<EXT_SUFFIX>
"""
import os
import subprocess
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pjrt_include():
    sys.path.insert(0, os.path.join(ROOT, "torch_tpu"))
    try:
        import _plugin_paths
        return _plugin_paths.pjrt_include_dir()
    finally:
        sys.path.pop(0)


def settings():
    # torch_tpu/settings.py imports only the standard library: load it without the package.
    import importlib.util
    spec = importlib.util.spec_from_file_location("_torch_tpu_settings",
                                                  os.path.join(ROOT, "torch_tpu", "settings.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(build_dir, out_dir, targets=()):
    """Builds OUT_DIR/_C<EXT_SUFFIX> (and the C++ unit tests unless `targets` names
    fewer); returns its path."""
    # Importing torch must not autoload the torch_tpu being rebuilt.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    import torch
    from torch.utils import cpp_extension

    os.makedirs(build_dir, exist_ok=True)
    args = [
        "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
        f"-DPJRT_INCLUDE_DIR={_pjrt_include()}",
        f"-DTORCH_VERSION={torch.__version__.split('+')[0]}",
        "-DTORCH_INCLUDE_DIRS=" + ";".join(cpp_extension.include_paths()),
        f"-DTORCH_LIBRARY_DIR={os.path.join(os.path.dirname(torch.__file__), 'lib')}",
        f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-DPYTHON_INCLUDE_DIR={sysconfig.get_paths()['include']}",
        f"-DEXT_OUTPUT_DIR={out_dir}",
        f"-DEXT_SUFFIX={sysconfig.get_config_var('EXT_SUFFIX')}",
        f"-DCMAKE_BUILD_TYPE={settings().get('TORCH_TPU_BUILD_TYPE')}",
    ]
    subprocess.check_call(args, stdout=subprocess.DEVNULL)
    jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
    target_args = [a for t in targets for a in ("--target", t)]
    subprocess.check_call(["cmake", "--build", build_dir, *target_args, "--", "-j", jobs])
    # Which torch it was built against: torch_tpu/_compat.py loads an in-place build only
    # for the same release.
    with open(os.path.join(out_dir, "_C.torch_version"), "w") as f:
        f.write(torch.__version__ + "\n")
    return os.path.join(out_dir, "_C" + sysconfig.get_config_var("EXT_SUFFIX"))


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    print(build(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), targets=("_C",)))

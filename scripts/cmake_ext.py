"""Configures and builds the extension torch_tpu._C with CMake + Ninja against the torch
of the interpreter that runs this (setup.py uses it; so do build_wheel.sh and
build_matrix.sh, once per torch release, each into its own build folder).

    python scripts/cmake_ext.py BUILD_DIR OUT_DIR     # writes OUT_DIR/_C<EXT_SUFFIX>
    python scripts/cmake_ext.py --pch BUILD_DIR OUT_DIR   # the same, torch's headers precompiled
    python scripts/cmake_ext.py --sources             # the digest of the C++ sources

Next to the extension it notes the torch it was built against (_C.torch_version) and the
digest of the sources it was built from (_C.sources), so that build_wheel.sh packs no
extension built from older sources. In the build folder it notes the digest of the
headers it compiled against from the environment (torch's, the PJRT plugin's), so that
an environment deleted and remade with the same wheels reuses the build (see
reuse_headers).
"""
import hashlib
import json
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


def _xla_ffi_include():
    """jaxlib's include folder (XLA's FFI C API header), or "" without jaxlib; found
    without importing it."""
    import importlib.util
    spec = importlib.util.find_spec("jaxlib")
    if spec is None or not spec.submodule_search_locations:
        return ""
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


def settings():
    # torch_tpu/settings.py imports only the standard library: load it without the package.
    import importlib.util
    spec = importlib.util.spec_from_file_location("_torch_tpu_settings",
                                                  os.path.join(ROOT, "torch_tpu", "settings.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tree_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        yield from (os.path.join(dirpath, f) for f in sorted(filenames))


def _files_digest(files, base):
    """sha256 over `files`' paths (relative to `base`) and contents, in order."""
    h = hashlib.sha256()
    for path in files:
        h.update(os.path.relpath(path, base).encode() + b"\0")
        with open(path, "rb") as f:
            h.update(f.read() + b"\0")
    return h.hexdigest()


def sources_digest():
    """sha256 over the C++ sources and the CMake file (paths and contents)."""
    files = [os.path.join(ROOT, "CMakeLists.txt")] + list(_tree_files(os.path.join(ROOT, "csrc")))
    return _files_digest(files, ROOT)


HEADERS_STAMP = "env_headers.json"


def reuse_headers(build_dir, roots):
    """Ninja rebuilds what is older than its inputs, and pip writes an environment's files
    with the time of the install: an environment deleted and remade with the same torch
    (build_matrix.sh keeps one at a time) would rebuild every file. Where a header folder
    from the environment (`roots`) is byte for byte the one the last build in `build_dir`
    compiled against (its digest is noted there), its files get back the oldest time they
    had then, so that only what the sources changed is rebuilt; a different torch
    (another digest) rebuilds as usual. Returns {root: (digest, oldest mtime)} to note
    after the build."""
    try:
        with open(os.path.join(build_dir, HEADERS_STAMP)) as f:
            noted = json.load(f)
    except (OSError, ValueError):
        noted = {}
    now = {}
    for root in roots:
        files = list(_tree_files(root))
        digest = _files_digest(files, root)
        oldest = min(os.stat(p).st_mtime_ns for p in files)
        prev = noted.get(root)
        if prev and prev[0] == digest and oldest > prev[1]:
            for path in files:
                os.utime(path, ns=(prev[1], prev[1]))
            oldest = prev[1]
        now[root] = (digest, oldest)
    return now


def build(build_dir, out_dir, targets=(), pch=False, reuse_env_headers=False):
    """Builds OUT_DIR/_C<EXT_SUFFIX> (and the C++ unit tests unless `targets` names
    fewer); returns its path. `pch`: torch's headers precompiled (a build from scratch
    takes a fraction of the time; ccache, which helps incremental builds, does not
    cache such compiles). `reuse_env_headers`: see reuse_headers (the per-release builds
    of build_wheel.sh and build_matrix.sh, whose environments come and go)."""
    # Importing torch must not autoload the torch_tpu being rebuilt.
    os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    import torch
    from torch.utils import cpp_extension

    os.makedirs(build_dir, exist_ok=True)
    digest = sources_digest()
    torch_include = os.path.join(os.path.dirname(torch.__file__), "include")
    roots = [torch_include, _pjrt_include()]
    headers = reuse_headers(build_dir, roots) if reuse_env_headers else None
    args = [
        "cmake", "-S", ROOT, "-B", build_dir, "-G", "Ninja",
        f"-DPJRT_INCLUDE_DIR={_pjrt_include()}",
        f"-DXLA_FFI_INCLUDE_DIR={_xla_ffi_include()}",
        f"-DTORCH_VERSION={torch.__version__.split('+')[0]}",
        "-DTORCH_INCLUDE_DIRS=" + ";".join(cpp_extension.include_paths()),
        f"-DTORCH_LIBRARY_DIR={os.path.join(os.path.dirname(torch.__file__), 'lib')}",
        f"-DTORCH_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        f"-DPYTHON_INCLUDE_DIR={sysconfig.get_paths()['include']}",
        f"-DEXT_OUTPUT_DIR={out_dir}",
        f"-DEXT_SUFFIX={sysconfig.get_config_var('EXT_SUFFIX')}",
        f"-DCMAKE_BUILD_TYPE={settings().get('TORCH_TPU_BUILD_TYPE')}",
        f"-DTORCH_TPU_PCH={'ON' if pch else 'OFF'}",
    ]
    subprocess.check_call(args, stdout=subprocess.DEVNULL)
    jobs = os.environ.get("MAX_JOBS", str(os.cpu_count() or 2))
    target_args = [a for t in targets for a in ("--target", t)]
    subprocess.check_call(["cmake", "--build", build_dir, *target_args, "--", "-j", jobs])
    if headers is not None:
        with open(os.path.join(build_dir, HEADERS_STAMP), "w") as f:
            json.dump(headers, f)
    # Which torch it was built against: torch_tpu/_compat.py loads an in-place build only
    # for the same release. The sources' digest is taken before the build so that an edit
    # made while it ran marks it stale.
    with open(os.path.join(out_dir, "_C.torch_version"), "w") as f:
        f.write(torch.__version__ + "\n")
    with open(os.path.join(out_dir, "_C.sources"), "w") as f:
        f.write(digest + "\n")
    return os.path.join(out_dir, "_C" + sysconfig.get_config_var("EXT_SUFFIX"))


if __name__ == "__main__":
    if sys.argv[1:] == ["--sources"]:
        sys.exit(print(sources_digest()))
    argv = sys.argv[1:]
    pch = argv[:1] == ["--pch"]
    argv = argv[1:] if pch else argv
    if len(argv) != 2:
        sys.exit(__doc__)
    print(build(os.path.abspath(argv[0]), os.path.abspath(argv[1]), targets=("_C",), pch=pch,
                reuse_env_headers=True))

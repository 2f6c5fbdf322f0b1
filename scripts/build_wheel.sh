#!/usr/bin/env bash
# Builds one wheel, dist/torch_tpu-*.whl, holding one extension per torch release: for each
# Python interpreter given (each in an environment with a different torch release), the
# extension is built against its torch into torch_tpu/_ext/torch_<major>_<minor>/; the wheel
# packs every extension there, those built by earlier runs included (so an environment can
# be deleted once its extension is built), and `import torch_tpu` loads the one matching the
# installed torch (torch_tpu/_compat.py). An extension built from other sources than the
# checkout's (scripts/cmake_ext.py notes their digest) stops the script: rebuild it; with
# --skip-stale it is left out of the wheel instead (build_matrix.sh, which rebuilds the
# releases one at a time after a source change, packs each time what is current).
#   bash scripts/build_wheel.sh                               # .venv's torch, plus those built
#   bash scripts/build_wheel.sh .matrix/torch-2.15.0/bin/python ...
#   bash scripts/build_wheel.sh --pack                        # build nothing, pack what is built
#   bash scripts/build_wheel.sh --pack --skip-stale           # ... leaving out stale extensions
# scripts/build_matrix.sh makes such environments. Builds are incremental (build/torch-X.Y).
set -euo pipefail
cd "$(dirname "$0")/.."
pythons=()
pack_only=
skip_stale=
for a in "$@"; do
  case "$a" in
    --pack) pack_only=1 ;;
    --skip-stale) skip_stale=1 ;;
    *) pythons+=("$a") ;;
  esac
done
[ -n "$pack_only" ] || [ ${#pythons[@]} -gt 0 ] || pythons=(.venv/bin/python)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
for py in ${pythons[@]+"${pythons[@]}"}; do
  release=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$py" -c \
    "import torch; print('.'.join(torch.__version__.split('+')[0].split('.')[:2]))")
  echo "== extension for torch $release ($py)"
  "$py" scripts/cmake_ext.py --pch "build/torch-$release" "torch_tpu/_ext/torch_${release/./_}" >/dev/null
done
sources=$(python3 scripts/cmake_ext.py --sources)
packed=()
for dir in torch_tpu/_ext/torch_*/; do
  compgen -G "$dir/_C*.so" >/dev/null || continue  # a build folder's output, not built yet
  if [ "$(cat "$dir/_C.sources" 2>/dev/null)" != "$sources" ]; then
    # setup.py packs only current extensions; this says so, or stops.
    if [ -n "$skip_stale" ]; then
      echo "note: $dir was built from other sources; left out of the wheel" >&2
      continue
    fi
    echo "error: $dir was built from other sources; rebuild it" \
         "(bash scripts/build_wheel.sh ENV/bin/python, ENV holding its torch) or delete it" >&2
    exit 1
  fi
  packed+=("$(cat "$dir/_C.torch_version")")
done
[ ${#packed[@]} -gt 0 ] || { echo "error: no extension built under torch_tpu/_ext" >&2; exit 1; }
echo "== wheel with the extensions for torch ${packed[*]}"
rm -rf build/lib.* build/bdist.* dist/torch_tpu-*.whl
# Any interpreter with setuptools packs it (the wheel is tagged for its Python).
packer=${pythons[0]:-.venv/bin/python}
TORCH_TPU_WHEEL_EXTENSIONS=1 "$packer" -m pip wheel -q --no-build-isolation --no-deps -w dist .
ls dist/torch_tpu-*.whl

#!/usr/bin/env bash
# Builds one wheel, dist/torch_tpu-*.whl, holding one extension per torch release: for each
# Python interpreter given (each in an environment with a different torch release), the
# extension is built against its torch into torch_tpu/_ext/torch_<major>_<minor>/, and
# `import torch_tpu` loads the one matching the installed torch (torch_tpu/_compat.py).
#   bash scripts/build_wheel.sh                               # .venv's torch only
#   bash scripts/build_wheel.sh .venv/bin/python ../matrix-venvs/t2.14/bin/python ...
# scripts/build_matrix.sh makes such environments. Builds are incremental (build/torch-X.Y).
set -euo pipefail
cd "$(dirname "$0")/.."
pythons=("$@")
[ ${#pythons[@]} -gt 0 ] || pythons=(.venv/bin/python)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
rm -rf torch_tpu/_ext
for py in "${pythons[@]}"; do
  release=$(TORCH_DEVICE_BACKEND_AUTOLOAD=0 "$py" -c \
    "import torch; print('.'.join(torch.__version__.split('+')[0].split('.')[:2]))")
  echo "== extension for torch $release ($py)"
  "$py" scripts/cmake_ext.py "build/torch-$release" "torch_tpu/_ext/torch_${release/./_}" >/dev/null
done
rm -rf build/lib.* build/bdist.* dist/torch_tpu-*.whl
TORCH_TPU_WHEEL_EXTENSIONS=1 "${pythons[0]}" -m pip wheel -q --no-build-isolation --no-deps \
  -w dist .
ls dist/torch_tpu-*.whl

#!/usr/bin/env bash
# Builds and tests torch_tpu against several torch releases, before a release or after a
# change that may touch the torch API. For each version: a virtual environment with that
# torch (made once), the extension built against it (incrementally, build/torch-X.Y);
# then one wheel holding every extension built (scripts/build_wheel.sh), installed into
# each environment, and the smoke suite (tests/compat/smoke_suite.py: device API, a
# training step in the three execution modes, OpInfo samples, autocast, DDP over 2 ranks,
# the compile cache) run there. Prints a table; --out FILE also writes it as Markdown.
#   bash scripts/build_matrix.sh                       # 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0
#   bash scripts/build_matrix.sh 2.14.1 2.15.0         # some versions
#   bash scripts/build_matrix.sh --venvs DIR --out docs/matrix_results.md 2.14.1
# Environments go under .matrix/ unless --venvs says otherwise (each takes 1-6 GB: PyPI's
# torch builds for Linux carry CUDA, which runs on the CPU here). Where the machine's pip
# configuration caps torch, these installs go without it (PIP_CONFIG_FILE=/dev/null).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venvs=.matrix
out=
versions=()
while [ $# -gt 0 ]; do
  case "$1" in
    --venvs) venvs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) versions+=("$1"); shift ;;
  esac
done
[ ${#versions[@]} -gt 0 ] || versions=(2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
mkdir -p "$venvs" build/matrix
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
declare -A status
built=()

for v in "${versions[@]}"; do
  env_dir="$venvs/torch-$v"
  py="$env_dir/bin/python"
  log="build/matrix/torch-$v.log"
  : > "$log"
  if [ ! -x "$py" ] || ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$v')" \
      >>"$log" 2>&1; then
    echo "== torch $v: environment $env_dir"
    python3 -m venv "$env_dir" >>"$log" 2>&1
    pkgs=("torch==$v" xla-cpu-pjrt==0.0.1 setuptools wheel cmake ninja numpy pytest expecttest)
    # The machine's pip configuration first (it may point at local wheels); where it caps
    # torch below $v, without it (PyPI only).
    "$py" -m pip install -q --disable-pip-version-check "${pkgs[@]}" >>"$log" 2>&1 \
      || PIP_CONFIG_FILE=/dev/null "$py" -m pip install -q --disable-pip-version-check \
           "${pkgs[@]}" >>"$log" 2>&1 \
      || { status[$v]="environment failed (see $log)"; continue; }
  fi
  release=${v%.*}
  echo "== torch $v: build"
  if "$py" scripts/cmake_ext.py "build/torch-$release" "torch_tpu/_ext/torch_${release/./_}" \
      >>"$log" 2>&1; then
    built+=("$v")
  else
    status[$v]="build failed (see $log)"
  fi
done

if [ ${#built[@]} -gt 0 ]; then
  pys=()
  for v in "${built[@]}"; do pys+=("$venvs/torch-$v/bin/python"); done
  # build_wheel.sh rebuilds nothing here (each build folder is up to date); it packs.
  echo "== wheel"
  if ! bash scripts/build_wheel.sh "${pys[@]}" > build/matrix/wheel.log 2>&1; then
    for v in "${built[@]}"; do status[$v]="wheel failed (see build/matrix/wheel.log)"; done
    built=()
  fi
fi
wheel=$(ls dist/torch_tpu-*.whl 2>/dev/null | head -1)

for v in "${built[@]}"; do
  py="$venvs/torch-$v/bin/python"
  log="build/matrix/torch-$v.log"
  echo "== torch $v: smoke suite"
  "$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel" \
    >>"$log" 2>&1 || { status[$v]="wheel install failed (see $log)"; continue; }
  # From outside the checkout, so that the installed wheel is what is imported.
  summary=$(cd /tmp && "$py" -m pytest -q -p no:cacheprovider --rootdir "$root" \
    "$root/tests/compat/smoke_suite.py" 2>&1 | tee -a "$root/$log" | tail -1)
  status[$v]="$summary"
done

table="| torch | result |
|---|---|"
for v in "${versions[@]}"; do table+="
| $v | ${status[$v]:-not run} |"; done
echo
echo "$table"
[ -z "$out" ] || echo "$table" > "$out"
for v in "${versions[@]}"; do
  case "${status[$v]:-}" in *failed*|*error*) exit 1 ;; *passed*) ;; *) exit 1 ;; esac
done

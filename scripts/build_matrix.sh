#!/usr/bin/env bash
# Builds and tests torch_tpu against several torch releases, before a release or after a
# change that may touch the torch API. One release at a time, so that one environment is
# on disk at a time: a virtual environment with that torch, the extension built against it
# (torch_tpu/_ext/torch_X_Y, incrementally in build/torch-X.Y, torch's headers
# precompiled), the wheel packed from every extension built so far
# (scripts/build_wheel.sh --pack), installed there, and the smoke suite
# (tests/compat/smoke_suite.py: device API, a training step in the three execution modes,
# OpInfo samples, autocast, DDP over 2 ranks, the compile cache) and the minGPT demo's
# check (examples/mingpt/train.py --check, from a copy of examples/) run there from outside
# the checkout; then the environment is deleted unless --keep-envs. Extensions of other
# releases built from older sources are left out of the wheels until rebuilt
# (build_wheel.sh --skip-stale), so the last wheel written (dist/) carries every release
# built from the current sources. Prints a table; --out FILE also writes it as Markdown.
#   bash scripts/build_matrix.sh                       # 2.11.0 2.12.1 2.13.0 2.14.1 2.15.0
#   bash scripts/build_matrix.sh 2.14.1 2.15.0         # some versions
#   bash scripts/build_matrix.sh --venvs DIR --keep-envs --out FILE 2.14.1
# Environments go under .matrix/ unless --venvs says otherwise. PyPI's torch builds for
# Linux carry CUDA, which runs on the CPU here; torch cannot be imported without the
# NVIDIA library wheels it links (about 3.5 GB per release), but Triton (about 0.9 GB) is
# left out: torch imports without it and the CPU never uses it. Where the machine's pip
# configuration caps torch, the installs go without it (PIP_CONFIG_FILE=/dev/null).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venvs=$root/.matrix
out=
keep=
versions=()
while [ $# -gt 0 ]; do
  case "$1" in
    --venvs) venvs=$(realpath -m "$2"); shift 2 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --keep-envs) keep=1; shift ;;
    *) versions+=("$1"); shift ;;
  esac
done
[ ${#versions[@]} -gt 0 ] || versions=(2.11.0 2.12.1 2.13.0 2.14.1 2.15.0)
cd "$root"
mkdir -p "$venvs" build/matrix
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
# Lets ccache cache compiles that use the precompiled header.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
declare -A status build_time env_time demo

# pip, first with the machine's configuration (it may point at local wheels), else
# without it (PyPI only), for a machine whose configuration caps torch.
pip_install() {
  local py=$1; shift
  "$py" -m pip install -q --no-cache-dir --disable-pip-version-check "$@" \
    || PIP_CONFIG_FILE=/dev/null "$py" -m pip install -q --no-cache-dir \
         --disable-pip-version-check "$@"
}

# An environment holding torch==$1 (its requirements but Triton) and what the build and
# the smoke suite need.
make_env() {
  local v=$1 env_dir=$2 py="$2/bin/python" deps
  rm -rf "$env_dir"
  python3 -m venv "$env_dir" || return 1
  pip_install "$py" --no-deps "torch==$v" || return 1
  deps=$("$py" -c "from importlib.metadata import requires
print('\n'.join(r.split(';')[0].strip() for r in requires('torch')
                if 'extra ==' not in r and not r.startswith('triton')))") || return 1
  # shellcheck disable=SC2086  # one requirement per word
  pip_install "$py" $deps xla-cpu-pjrt==0.0.1 setuptools wheel cmake ninja numpy pytest expecttest \
    tqdm
}

# Minutes and seconds since $1 (a $SECONDS value).
since() { local s=$((SECONDS - $1)); printf '%d:%02d' $((s / 60)) $((s % 60)); }

for v in "${versions[@]}"; do
  env_dir="$venvs/torch-$v"
  py="$env_dir/bin/python"
  log="$root/build/matrix/torch-$v.log"
  release=${v%.*}
  : > "$log"
  if [ ! -x "$py" ] || ! "$py" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$v')" \
      >>"$log" 2>&1; then
    echo "== torch $v: environment $env_dir"
    start=$SECONDS
    make_env "$v" "$env_dir" >>"$log" 2>&1 || { status[$v]="environment failed (see $log)"; continue; }
    env_time[$v]=$(since $start)
  fi
  # The demo needs tqdm (an environment made before it was added lacks it).
  "$py" -c "import tqdm" >/dev/null 2>&1 || pip_install "$py" tqdm >>"$log" 2>&1
  echo "== torch $v: build"
  start=$SECONDS
  if ! "$py" scripts/cmake_ext.py --pch "build/torch-$release" "torch_tpu/_ext/torch_${release/./_}" \
      >>"$log" 2>&1; then
    status[$v]="build failed (see $log)"
    continue
  fi
  build_time[$v]=$(since $start)
  echo "== torch $v: wheel, smoke suite, demo check"
  if ! bash scripts/build_wheel.sh --pack --skip-stale >>"$log" 2>&1; then
    status[$v]="wheel failed (see $log)"
    continue
  fi
  "$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall \
    dist/torch_tpu-*.whl >>"$log" 2>&1 || { status[$v]="wheel install failed (see $log)"; continue; }
  # From outside the checkout, so that the installed wheel is what is imported.
  if ! (cd /tmp && "$py" -c "import torch_tpu._C as c, sys; print(c.__file__)
sys.exit('site-packages' not in c.__file__)") >>"$log" 2>&1; then
    status[$v]="the wheel's extension does not load (see $log)"
    continue
  fi
  status[$v]=$(cd /tmp && "$py" -m pytest -q -p no:cacheprovider --rootdir "$root" \
    "$root/tests/compat/smoke_suite.py" 2>&1 | tee -a "$log" | tail -1)
  demo_dir=$(mktemp -d)
  cp -r examples "$demo_dir/"
  demo[$v]=$(cd "$demo_dir" && "$py" examples/mingpt/train.py --check 2>&1 | tee -a "$log" \
    | grep '^check: ' | tail -2 | sed 's/^check: //' | paste -sd ' ')
  rm -rf "$demo_dir"
  [ -n "$keep" ] || rm -rf "$env_dir"
done

table="| torch | environment made | build (this run, m:ss) | smoke suite | demo check |
|---|---|---|---|---|"
for v in "${versions[@]}"; do table+="
| $v | ${env_time[$v]:-kept} | ${build_time[$v]:--} | ${status[$v]:-not run} | ${demo[$v]:-not run} |"; done
wheel=$(ls dist/torch_tpu-*.whl 2>/dev/null | head -1)
[ -z "$wheel" ] || table+="

$wheel carries: $(python3 -c "import re, sys, zipfile
print(' '.join(sorted({m.group(1).replace('_', '.') for n in zipfile.ZipFile(sys.argv[1]).namelist()
                       for m in [re.match(r'torch_tpu/_ext/torch_(\d+_\d+)/_C', n)] if m})))" "$wheel")"
echo
echo "$table"
[ -z "$out" ] || echo "$table" > "$out"
for v in "${versions[@]}"; do
  case "${status[$v]:-}" in *failed*|*error*) exit 1 ;; *passed*) ;; *) exit 1 ;; esac
  case "${demo[$v]:-}" in *OK) ;; *) exit 1 ;; esac
done

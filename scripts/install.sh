#!/usr/bin/env bash
# Creates the project's virtual environment (.venv) when it is missing, installs what
# torch_tpu needs into it and builds the extension in place (incremental on re-runs).
#   bash scripts/install.sh         # what the demo needs
#   bash scripts/install.sh test    # plus everything the tests import
#   bash scripts/install.sh vllm    # .venv (test) plus the serving environment .venv-vllm
# Nothing outside .venv is used, so a package installed by hand elsewhere cannot
# make a fresh machine look ready when it is not.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-run}
if [ "$what" = vllm ]; then
  bash scripts/install.sh test
  exec bash scripts/install_vllm.sh
fi
[ -x .venv/bin/python ] || python3 -m venv .venv
py=.venv/bin/python
"$py" -m pip install -q --disable-pip-version-check -r "requirements/$what.txt"
[ ! -f "requirements/$what-nodeps.txt" ] \
  || "$py" -m pip install -q --disable-pip-version-check --no-deps -r "requirements/$what-nodeps.txt"
command -v ccache >/dev/null || (apt-get install -y -q ccache >/dev/null 2>&1 || true)
# ccache keys on paths relative to the checkout, so a fresh clone reuses earlier builds.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps -e .

#!/usr/bin/env bash
# Creates/refreshes the TorchTitan environment .venv-titan (requirements/titan.txt).
# A second environment because TorchTitan imports triton, which the project's test stack
# does not hold. It shares the project's .venv (torch, torch_tpu and the libraries both
# need) through a .pth file that adds .venv's site-packages behind its own, so it holds
# only TorchTitan, triton and TorchTitan's few other requirements. Run install.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ -x .venv/bin/python ] || { echo "run scripts/install.sh first (.venv missing)" >&2; exit 1; }
[ -x .venv-titan/bin/python ] || python3 -m venv .venv-titan
py=.venv-titan/bin/python
site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shared=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# addsitedir also runs the .pth files there (torch_tpu's editable install among them).
echo "import site; site.addsitedir('$shared')" > "$site/zz_project_venv.pth"
# Already there: skip pip (its resolve alone takes a minute over .venv's packages).
pins=$(sed -n 's/^\([A-Za-z0-9_.-]*\)==\([^ #]*\).*/\1 \2/p' requirements/titan.txt)
if ! "$py" - $pins <<'PY' 2>/dev/null
import importlib.metadata as m, sys
a = sys.argv[1:]
assert all(m.version(n) == v for n, v in zip(a[::2], a[1::2]))
PY
then
  # pip also reports that torchrec lacks fbgemm-gpu: .venv installs torchrec --no-deps on
  # purpose (it uses fbgemm-gpu-cpu); nothing to do with TorchTitan.
  "$py" -m pip install -q --disable-pip-version-check -r requirements/titan.txt
  "$py" -c "import torchtitan.train, torch_tpu" || { echo "TorchTitan env broken" >&2; exit 1; }
fi

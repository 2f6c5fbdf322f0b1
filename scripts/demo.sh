#!/usr/bin/env bash
# The demo: install, build, then train a model on the tpu device (CPU PJRT plugin by default).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python3 examples/train_mlp.py "$@"

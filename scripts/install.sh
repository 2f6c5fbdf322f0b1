#!/usr/bin/env bash
# Installs what torch_tpu needs and builds it in place (incremental on re-runs).
# torch==2.13.0 is pinned: a bare `torch` would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install -q torch==2.13.0 xla-cpu-pjrt setuptools wheel cmake ninja pytest numpy
command -v ccache >/dev/null || (apt-get install -y -q ccache >/dev/null 2>&1 || true)
python3 -m pip install -q --no-build-isolation -e .

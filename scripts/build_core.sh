#!/usr/bin/env bash
# Builds only the torch-free layers (csrc/pjrt, csrc/hlo) and their C++ tests into build/core.
set -euo pipefail
cd "$(dirname "$0")/.."
inc=$(python torch_tpu/_plugin_paths.py include)
cmake -S . -B build/core -G Ninja -DTORCH_TPU_CORE_ONLY=ON -DPJRT_INCLUDE_DIR="$inc" >/dev/null
cmake --build build/core

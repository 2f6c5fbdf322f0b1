#!/usr/bin/env bash
# The test command: install, build, then the C++ unit tests and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
python3 -m pytest -q tests "$@"

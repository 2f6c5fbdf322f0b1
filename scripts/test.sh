#!/usr/bin/env bash
# The test command: create/refresh .venv, build, then the C++ unit tests and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
source .venv/bin/activate
python -m pytest -q tests "$@"

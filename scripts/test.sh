#!/usr/bin/env bash
# The test command: create/refresh .venv, build, then the C++ unit tests and the Python
# suite (its TorchTitan tests run in .venv-titan, made first); then the serving tests
# (tests/vllm_serving) in the serving environment .venv-vllm
# (skipped when the arguments name test paths none of which is under tests/vllm_serving).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh test
# The TorchTitan environment .venv-titan, which tests/integrations/test_torchtitan.py runs.
bash scripts/install_titan.sh
source .venv/bin/activate
# A failure in the main suite still lets the serving tests run; the exit status is the
# first failure's.
status=0
python -m pytest -q tests "$@" || status=$?
deactivate
serving=1
for a in "$@"; do
  if [ -e "${a%%::*}" ]; then serving=0; fi
done
for a in "$@"; do
  case "$a" in tests/vllm_serving*) serving=1 ;; esac
done
if [ "$serving" = 1 ]; then
  bash scripts/install_vllm.sh
  args=()
  for a in "$@"; do [ -e "${a%%::*}" ] || args+=("$a"); done
  serving_status=0
  .venv-vllm/bin/python -m pytest -q tests/vllm_serving "${args[@]}" || serving_status=$?
  [ "$status" != 0 ] || status=$serving_status
fi
exit "$status"

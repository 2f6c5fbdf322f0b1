"""Fixtures of the serving tests (run in .venv-vllm by scripts/test.sh)."""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

# The engine runs in this process (no EngineCore subprocess): faster start, and the
# tests can read torch_tpu.debug.metrics() of the process that runs the model.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def llama_dir(tmp_path_factory):
    from tiny_models import save_model

    path = str(tmp_path_factory.mktemp("tiny_llama"))
    save_model(path, "llama")
    return path

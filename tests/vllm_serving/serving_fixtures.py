"""Fixtures of the serving tests (run in .venv-vllm by scripts/test.sh), loaded by
tests/conftest.py as a plugin."""
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


# Small limits: few buckets, so warm-up is short (tokens 16..64, requests 1..8).
ENGINE_ARGS = dict(dtype="float32", max_model_len=512, max_num_seqs=8,
                   max_num_batched_tokens=64, block_size=16,
                   kv_cache_memory_bytes=16 << 20, seed=0)


@pytest.fixture(scope="session")
def llm(llama_dir):
    """One engine for the session (vLLM's in-process engine holds process-wide state)."""
    import paged_reference
    from vllm import LLM

    paged_reference.register_if_missing()
    return LLM(model=llama_dir, **ENGINE_ARGS)


def runner_of(llm):
    return llm.llm_engine.model_executor.driver_worker.worker.model_runner

"""Offline generation with vLLM on the tpu device against Transformers on the CPU."""
import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

import torch  # noqa: E402
import torch_tpu  # noqa: E402,F401

import paged_reference  # noqa: E402

paged_reference.register_if_missing()

# Small limits: few buckets, so warm-up is short (tokens 16..64, requests 1..8).
ENGINE_ARGS = dict(dtype="float32", max_model_len=256, max_num_seqs=8,
                   max_num_batched_tokens=64, block_size=16,
                   kv_cache_memory_bytes=16 << 20, seed=0)

PROMPTS = [[5, 17, 42], list(range(10, 60)), [7] * 9 + [100, 101], [3]]


@pytest.fixture(scope="module")
def llm(llama_dir):
    from vllm import LLM

    engine = LLM(model=llama_dir, **ENGINE_ARGS)
    yield engine
    del engine


def _hf_greedy(model_dir, prompt, n):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # as ignore_eos: always n tokens
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                         do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def test_runs_on_tpu(llm):
    runner = llm.llm_engine.model_executor.driver_worker.worker.model_runner
    assert runner.device.type == "tpu"
    assert next(runner.model.parameters()).device.type == "tpu"
    assert runner.kv_caches[0].device.type == "tpu"


def test_greedy_matches_transformers_on_cpu(llm, llama_dir):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    n = 12
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in PROMPTS], params,
                        use_tqdm=False)
    for prompt, out in zip(PROMPTS, outs):
        got = list(out.outputs[0].token_ids)
        assert got == _hf_greedy(llama_dir, prompt, n), prompt

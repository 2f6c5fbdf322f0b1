"""Bounded compilation: after warm-up, requests of any prompt and output length run
on programs compiled during warm-up (token and request counts padded to buckets)."""
import random

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

import torch_tpu  # noqa: E402
from serving_fixtures import runner_of  # noqa: E402


def test_buckets_are_powers_of_two_up_to_the_limits(llm):
    runner = runner_of(llm)
    assert runner.token_buckets == [16, 32, 64]
    assert runner.req_buckets == [1, 2, 4, 8]
    assert runner.num_warmup_shapes == 12  # every (tokens, requests) pair with R <= T
    print(f"warm-up: {runner.num_warmup_shapes} shapes in {runner.warmup_seconds:.1f} s")


def _random_requests(n, seed, vocab):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    rng = random.Random(seed)
    prompts, params = [], []
    for _ in range(n):
        prompts.append(TokensPrompt(prompt_token_ids=[rng.randrange(3, vocab)
                                                      for _ in range(rng.randint(1, 400))]))
        kind = rng.randrange(3)
        sampling = ({"temperature": 0.0} if kind == 0 else {"temperature": 0.9} if kind == 1
                    else {"temperature": 0.7, "top_p": 0.8, "top_k": 20})
        params.append(SamplingParams(max_tokens=rng.randint(1, 24), ignore_eos=True, **sampling))
    return prompts, params


def _compiles():
    m = torch_tpu.debug.metrics()
    return m["programs_compiled"] + m["disk_hits"]  # compiled, or loaded from the disk cache


@pytest.mark.parametrize("n", [24])
def test_no_program_compiled_after_warm_up(llm, n):
    prompts, params = _random_requests(n, seed=1, vocab=len(llm.get_tokenizer()))
    before = _compiles()
    outs = llm.generate(prompts, params, use_tqdm=False)
    assert [len(o.outputs[0].token_ids) for o in outs] == [p.max_tokens for p in params]
    assert _compiles() == before


@pytest.mark.slow
def test_no_program_compiled_after_warm_up_200_requests(llm):
    test_no_program_compiled_after_warm_up(llm, 200)

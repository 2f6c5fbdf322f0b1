"""Sampling on the tpu device through vLLM's sampler: top-k/top-p, seeds, stop strings,
logprobs, n>1 (checked against Transformers' logits on the CPU where it applies)."""
import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

import torch  # noqa: E402
from vllm import SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

PROMPT = [5, 17, 42, 99, 7]


@pytest.fixture(scope="module")
def cpu_logits(llama_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor([PROMPT])).logits[0, -1]


def _first_tokens(llm, params, n):
    outs = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)] * n, params, use_tqdm=False)
    return [o.outputs[0].token_ids[0] for o in outs]


def test_top_k_samples_stay_in_the_cpu_top_k(llm, cpu_logits):
    top5 = set(cpu_logits.topk(5).indices.tolist())
    got = _first_tokens(llm, SamplingParams(temperature=1.0, top_k=5, max_tokens=1), 32)
    assert set(got) <= top5
    assert len(set(got)) > 1  # it samples, not argmax


def test_top_k_1_is_greedy(llm, cpu_logits):
    got = _first_tokens(llm, SamplingParams(temperature=1.0, top_k=1, max_tokens=1), 4)
    assert got == [int(cpu_logits.argmax())] * 4


def test_top_p_keeps_the_nucleus(llm, cpu_logits):
    probs = torch.softmax(cpu_logits / 0.5, dim=-1)
    sorted_p, idx = probs.sort(descending=True)
    keep = idx[: int((sorted_p.cumsum(0) < 0.5).sum()) + 1].tolist()
    got = _first_tokens(llm, SamplingParams(temperature=0.5, top_p=0.5, max_tokens=1), 24)
    assert set(got) <= set(keep)


def test_seed_reproduces(llm):
    def run(seed):
        p = SamplingParams(temperature=1.0, seed=seed, max_tokens=8, ignore_eos=True)
        return llm.generate([TokensPrompt(prompt_token_ids=PROMPT)], p,
                            use_tqdm=False)[0].outputs[0].token_ids

    assert run(1) == run(1)
    assert run(1) != run(2)


def test_n_greater_than_one(llm):
    p = SamplingParams(n=3, temperature=1.0, seed=0, max_tokens=6, ignore_eos=True)
    out = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)], p, use_tqdm=False)[0]
    assert len(out.outputs) == 3
    assert all(len(c.token_ids) == 6 for c in out.outputs)
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1


def test_logprobs_match_cpu(llm, cpu_logits):
    p = SamplingParams(temperature=0.0, max_tokens=1, logprobs=3)
    out = llm.generate([TokensPrompt(prompt_token_ids=PROMPT)], p, use_tqdm=False)[0].outputs[0]
    ref = torch.log_softmax(cpu_logits, dim=-1)
    lp = out.logprobs[0]
    assert out.token_ids[0] == int(ref.argmax())
    assert len(lp) >= 3
    for token, entry in lp.items():
        assert abs(entry.logprob - float(ref[token])) < 1e-4


def test_stop_string_cuts_the_text(llm):
    base = llm.generate("The quick brown fox", SamplingParams(temperature=0.0, max_tokens=16,
                                                              ignore_eos=True),
                        use_tqdm=False)[0].outputs[0].text
    assert len(base) > 8
    stop = base[5:8]
    out = llm.generate("The quick brown fox", SamplingParams(temperature=0.0, max_tokens=16,
                                                             ignore_eos=True, stop=[stop]),
                       use_tqdm=False)[0].outputs[0]
    assert out.text == base[:base.index(stop)]
    assert out.finish_reason == "stop"

"""Offline generation with vLLM on the tpu device against Transformers on the CPU."""
import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

import torch  # noqa: E402
import torch_tpu  # noqa: E402,F401
from serving_fixtures import runner_of  # noqa: E402

PROMPTS = [[5, 17, 42], list(range(10, 60)), [7] * 9 + [100, 101], [3]]

def _hf_greedy(model_dir, prompt, n):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None  # as ignore_eos: always n tokens
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                         do_sample=False, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def test_runs_on_tpu(llm):
    runner = runner_of(llm)
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


def test_kv_cache_writes_are_donated(llm):
    """Each layer's cache write reuses the cache's buffer (no copy of the cache per step):
    the runner holds one reference per cache, so Strict Eager donates it every time."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    runner = runner_of(llm)
    before = torch_tpu.debug.metrics()["donated_inputs"]
    steps = 5  # one prefill, then a decode step per token after the first
    llm.generate([TokensPrompt(prompt_token_ids=[5, 6, 7])],
                 SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True),
                 use_tqdm=False)
    donated = torch_tpu.debug.metrics()["donated_inputs"] - before
    assert donated >= len(runner.kv_caches) * steps, donated


@pytest.mark.slow
def test_compiled_runner_matches_transformers_and_compiles_nothing_after_warm_up(llama_dir):
    """The runner's compiled path (additional_config torch_tpu_compile: one torch.compile
    graph per token bucket, each one fused program) gives Transformers' greedy tokens, compiles
    nothing after warm-up and updates the KV caches in place. In its own process: vLLM's
    in-process engine keeps process-wide state (the session's eager engine is loaded)."""
    import json
    import os

    from conftest import run_python

    here = os.path.dirname(os.path.abspath(__file__))
    code = f"""
        import json, sys
        sys.path.insert(0, {here!r})
        import torch_tpu
        from serving_fixtures import ENGINE_ARGS, runner_of
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt
        llm = LLM(model={llama_dir!r}, additional_config={{"torch_tpu_compile": True}},
                  **ENGINE_ARGS)
        runner = runner_of(llm)
        before = torch_tpu.debug.metrics()
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in {PROMPTS!r}],
                            SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True),
                            use_tqdm=False)
        after = torch_tpu.debug.metrics()
        graphs = torch_tpu.debug.compiled_graphs()
        print("RESULT " + json.dumps(dict(
            compiled=runner.compiled, layers=len(runner.kv_caches),
            tokens=[list(o.outputs[0].token_ids) for o in outs],
            compiles=after["programs_compiled"] - before["programs_compiled"]
                     + after["disk_hits"] - before["disk_hits"],
            donated=after["donated_inputs"] - before["donated_inputs"],
            graphs=len(graphs), recorded=[g["why_recorded"] for g in graphs
                                          if g["why_recorded"]])))
    """
    proc = run_python(code, timeout=1200)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    r = json.loads(lines[-1][len("RESULT "):])
    assert r["compiled"] and r["compiles"] == 0 and not r["recorded"], r
    # One per token bucket of ENGINE_ARGS (16, 32, 64): the request count is not a shape
    # of the model's program (the attention metadata always has max_num_seqs rows).
    assert r["graphs"] == 3
    steps = 12  # a prefill step and 11 decode steps (all four prompts fit one batch)
    assert r["donated"] >= r["layers"] * steps, r
    for prompt, got in zip(PROMPTS, r["tokens"]):
        assert got == _hf_greedy(llama_dir, prompt, 12), prompt

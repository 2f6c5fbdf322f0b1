"""Sliding-window attention through vLLM on tpu: greedy output equals Transformers on the
CPU (float32) for models whose window is shorter than the prompts plus their outputs.

The step budget (32 tokens) is smaller than the prompts together, so vLLM chunks the
long prompts and the run has prefill-only, decode-only and mixed steps (a chunk beside
decodes); the script records every step's mix and the test checks all three happened.
Each model runs in a fresh process (vLLM's in-process engine keeps process-wide state).
"""
import json
import os
import textwrap

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

PROMPTS = [[5, 17, 42], list(range(10, 40)), [7] * 9 + [100, 101], list(range(60, 110))]
MAX_TOKENS = 16

_SCRIPT = textwrap.dedent("""
    import json, sys, tempfile, torch
    sys.path.insert(0, {here!r})
    import torch_tpu, paged_reference
    paged_reference.register_if_missing()
    from tiny_models import save_model
    from serving_fixtures import ENGINE_ARGS, runner_of
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from transformers import AutoConfig, AutoModelForCausalLM
    d = tempfile.mkdtemp()
    save_model(d, {arch!r}, **{overrides!r})
    llm = LLM(model=d, **dict(ENGINE_ARGS, max_num_batched_tokens=32))
    runner = runner_of(llm)
    windows = sorted({{layer.impl.sliding_window
                       for layer in runner._attention_layers().values()}})
    # Each step's mix: (prompt tokens, decode requests) as the runner sees it.
    steps, build = [], runner._build_batch
    def recording(req_ids, num_scheduled):
        prompt_tokens = decodes = 0
        for r in req_ids:
            req = runner.requests[r]
            prompt_len = len(req.token_ids) - len(req.outputs)
            if req.num_computed < prompt_len:
                prompt_tokens += num_scheduled[r]
            else:
                decodes += 1
        steps.append((prompt_tokens, decodes))
        return build(req_ids, num_scheduled)
    runner._build_batch = recording
    before = torch_tpu.debug.metrics()
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in {prompts!r}],
                        SamplingParams(temperature=0.0, max_tokens={n}, ignore_eos=True),
                        use_tqdm=False)
    after = torch_tpu.debug.metrics()
    def greedy(hf):
        hf.generation_config.eos_token_id = None
        out = []
        for p in {prompts!r}:
            ids = torch.tensor([p])
            out.append(hf.generate(ids, attention_mask=torch.ones_like(ids),
                                   max_new_tokens={n}, do_sample=False,
                                   pad_token_id=0)[0, len(p):].tolist())
        return out
    refs = greedy(AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval())
    # The same weights without the window: the window must change some output.
    full = AutoConfig.from_pretrained(d)
    full.sliding_window = 1 << 20  # longer than any context here
    unwindowed = greedy(AutoModelForCausalLM.from_pretrained(d, config=full,
                                                             dtype=torch.float32).eval())
    print("RESULT " + json.dumps(dict(
        windows=windows, steps=steps, refs=refs, unwindowed=unwindowed,
        tokens=[list(o.outputs[0].token_ids) for o in outs],
        compiles=after["programs_compiled"] - before["programs_compiled"])))
""")


def _run(arch, overrides):
    from conftest import run_python

    here = os.path.dirname(os.path.abspath(__file__))
    code = _SCRIPT.format(here=here, arch=arch, overrides=overrides, prompts=PROMPTS,
                          n=MAX_TOKENS)
    proc = run_python(code, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.slow
@pytest.mark.parametrize("arch,overrides,windows", [
    # Mistral: vLLM applies the config's window to every layer; 20 spans two blocks of 16.
    ("mistral", {"sliding_window": 20}, [20]),
    # Qwen3: per-layer windows (every layer sliding); 6 is shorter than one block.
    ("qwen3", {"sliding_window": 6, "use_sliding_window": True, "max_window_layers": 0}, [6]),
    # Gemma 2: sliding and full layers alternate (-1: no window), with attention and
    # final-logit soft caps. vLLM keeps one KV-cache group (the platform has no hybrid
    # KV-cache manager), and each layer's attention applies its own window.
    ("gemma2", {"sliding_window": 12, "num_hidden_layers": 4}, [-1, 12]),
])
def test_sliding_window_greedy_matches_transformers(arch, overrides, windows):
    r = _run(arch, overrides)
    assert r["windows"] == windows, r["windows"]
    window = max(windows)
    prefill_only = any(p > 0 and d == 0 for p, d in r["steps"])  # (prompt tokens, decodes)
    decode_only = any(p == 0 and d > 0 for p, d in r["steps"])
    mixed = any(p > 0 and d > 0 for p, d in r["steps"])
    assert prefill_only and decode_only and mixed, r["steps"]
    assert r["compiles"] == 0, r  # the window is part of the warmed-up programs
    assert r["refs"] != r["unwindowed"]  # the window changes Transformers' own output
    # All but the shortest prompt outgrow the window (the shortest may stay inside it).
    assert all(len(p) + MAX_TOKENS > window for p in PROMPTS[1:])
    for prompt, got, ref in zip(PROMPTS, r["tokens"], r["refs"]):
        assert got == ref, (prompt, got, ref)

"""More architectures through vLLM on tpu: greedy output equals Transformers on the CPU.
Each runs in a fresh process (vLLM's in-process engine keeps process-wide state)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

_SCRIPT = textwrap.dedent("""
    import sys, tempfile, torch
    sys.path.insert(0, {here!r})
    import torch_tpu, paged_reference
    paged_reference.register_if_missing()
    from tiny_models import save_model
    from serving_fixtures import ENGINE_ARGS
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from transformers import AutoModelForCausalLM
    d = tempfile.mkdtemp()
    save_model(d, {arch!r})
    prompts = [[5, 17, 42], list(range(10, 40)), [7] * 9]
    llm = LLM(model=d, **ENGINE_ARGS)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                        SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True),
                        use_tqdm=False)
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None
    for p, o in zip(prompts, outs):
        ids = torch.tensor([p])
        ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10,
                          do_sample=False, pad_token_id=0)[0, len(p):].tolist()
        assert list(o.outputs[0].token_ids) == ref, (p, o.outputs[0].token_ids, ref)
    print("MATCH")
""")


@pytest.mark.slow
# qwen3_moe runs through our MoE method (integrations/vllm/fused_moe.py).
@pytest.mark.parametrize("arch", ["qwen3", "qwen3_moe"])
def test_greedy_matches_transformers(arch):
    code = _SCRIPT.format(here=os.path.dirname(os.path.abspath(__file__)), arch=arch)
    env = dict(os.environ, VLLM_ENABLE_V1_MULTIPROCESSING="0")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=900)
    assert out.returncode == 0 and "MATCH" in out.stdout, out.stderr[-4000:]

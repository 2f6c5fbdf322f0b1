"""torch.compile(model) with the default backend ("inductor") on tpu: inductor hands
each graph whole to torch_tpu's compiler (torch_tpu/dynamo/inductor_backend.py), so
no JAX/Pallas kernel is generated and the result matches the CPU."""
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters

import torch_tpu
from conftest import assert_close_cpu, run_python

TOL = dict(rtol=1e-4, atol=1e-5)


class Block(nn.Module):
    """A small pre-norm transformer block (causal attention + MLP)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _forward_backward(model, x, compiled):
    fn = torch.compile(model) if compiled else model
    out = fn(x)
    out.square().mean().backward()
    return out, [p.grad for p in model.parameters()]


def _check_model(make, shape, mode):
    torch.manual_seed(0)
    cpu = make()
    dev = make().to("tpu")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randn(*shape)
    torch_tpu.set_execution_mode(mode)
    out, grads = _forward_backward(dev, x.to("tpu"), compiled=True)
    ref, ref_grads = _forward_backward(cpu, x, compiled=False)
    assert_close_cpu(out, ref, **TOL)
    for g, rg in zip(grads, ref_grads):
        assert_close_cpu(g, rg, **TOL)


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_mlp_forward_backward_matches_cpu(mode):
    _check_model(_mlp, (5, 8), mode)


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_transformer_block_forward_backward_matches_cpu(mode):
    _check_model(Block, (2, 6, 32), mode)


def test_whole_graph_is_one_program_called_directly_without_recompiles():
    model = _mlp().to("tpu")
    fn = torch.compile(model)
    x = torch.randn(5, 8)
    with torch.no_grad():
        fn(x.to("tpu"))
        frames = counters["stats"]["unique_graphs"]
        recs = [r for r in torch_tpu.debug.compiled_graphs() if r["kind"] == "inductor"]
        assert len(recs) == 1 and recs[0]["why_recorded"] is None
        out = fn(x.to("tpu"))  # second call: no recompile, the trace is launched directly
        assert counters["stats"]["unique_graphs"] == frames
        rec = [r for r in torch_tpu.debug.compiled_graphs() if r["kind"] == "inductor"][0]
        assert rec["calls"] == 2 and rec["direct_calls"] == 1
        assert_close_cpu(out, model.cpu()(x), **TOL)


def test_input_mutation_buffers_update():
    bn = nn.BatchNorm1d(6)
    dev = nn.BatchNorm1d(6).to("tpu")
    x = torch.randn(10, 6)
    out = torch.compile(dev)(x.to("tpu"))
    ref = bn(x)
    assert_close_cpu(out, ref, **TOL)
    assert_close_cpu(dev.running_mean, bn.running_mean, **TOL)
    assert_close_cpu(dev.running_var, bn.running_var, **TOL)


def test_no_graph_break_and_no_jax():
    from torch._dynamo.utils import counters as c
    c.clear()
    had_jax = "jax" in sys.modules  # an earlier test (tests/kernels) may have imported it
    torch.compile(_mlp().to("tpu"), fullgraph=True)(torch.randn(3, 8, device="tpu"))
    assert ("jax" in sys.modules) == had_jax  # compiling did not import it
    assert sum(c["graph_break"].values()) == 0


def test_registered_through_inductor_extension_point():
    from torch._inductor.codegen import common
    from torch_tpu.dynamo import inductor_backend
    common.init_backend_registration()
    assert common.get_scheduling_for_device("tpu") is inductor_backend.TpuScheduling
    assert isinstance(common.get_custom_backend_pass_for_device("tpu"),
                      inductor_backend.WholeGraphPass)


def test_fresh_process_with_cached_wrapper_finds_its_graph(tmp_path):
    # Inductor's FX-graph cache serves the second process the first one's wrapper
    # without running our pass: the graph comes from its file next to that cache.
    code = """
        import torch, torch_tpu
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
        x = torch.randn(2, 4)
        with torch.no_grad():
            out = torch.compile(m.to("tpu"))(x.to("tpu")).cpu()
            torch.testing.assert_close(out, m.cpu()(x), rtol=1e-4, atol=1e-5)
        from torch._dynamo.utils import counters
        print("HITS", counters["inductor"]["fxgraph_cache_hit"])
    """
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    first = run_python(code, env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run_python(code, env=env, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "HITS 1" in second.stdout, second.stdout


# Transformers: generate() with a static cache compiles the decoding step on tpu. Its
# own default for a tpu model is backend="tpu"; a CompileConfig given by the user (or by
# Transformers' own compile tests) has the class defaults, backend "inductor" with
# mode "reduce-overhead". Transformers' compile tests also train a torch.compile'd model.
_LLAMA = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)


def _llamas():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(transformers.LlamaConfig(**_LLAMA))
    dev = transformers.LlamaForCausalLM(transformers.LlamaConfig(**_LLAMA))
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("tpu")


def test_transformers_static_cache_generate_with_default_compile_config():
    from transformers import CompileConfig
    cpu, dev = _llamas()
    config = CompileConfig()
    assert config.backend == "inductor"
    ids = torch.randint(3, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    had_jax = "jax" in sys.modules
    with torch.no_grad():
        want = cpu.eval().generate(ids, max_new_tokens=5, do_sample=False, eos_token_id=None,
                                   cache_implementation="static")
        got = dev.eval().generate(ids.to("tpu"), max_new_tokens=5, do_sample=False,
                                  eos_token_id=None, cache_implementation="static",
                                  compile_config=config)
    assert torch.equal(got.cpu(), want)
    recs = [r for r in torch_tpu.debug.compiled_graphs() if r["kind"] == "inductor"]
    assert recs and sum(r["calls"] for r in recs) >= 3  # the decoding steps ran compiled
    assert ("jax" in sys.modules) == had_jax


_SMALL = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              head_dim=8, pad_token_id=0)


@pytest.mark.parametrize("model_type", [
    "llama", *(pytest.param(t, marks=pytest.mark.slow)
               for t in ("mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo2", "cohere"))])
def test_transformers_torch_compile_for_training(model_type):
    """Transformers' own `test_torch_compile_for_training` (test_modeling_common.py), on
    tpu: torch.compile(model, fullgraph=True, mode="reduce-overhead"), a padded attention
    mask, gradients equal to eager's; here also to the CPU's."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(model_type, **_SMALL)
    torch.manual_seed(0)
    cpu = transformers.AutoModelForCausalLM.from_config(cfg)
    dev = transformers.AutoModelForCausalLM.from_config(cfg)
    dev.load_state_dict(cpu.state_dict())
    dev.to("tpu")
    g = torch.Generator().manual_seed(0)
    inputs = {"input_ids": torch.randint(1, 99, (2, 10), generator=g),
              "attention_mask": torch.tensor([[1] * 5 + [0] * 5, [1] * 10]),
              "position_ids": torch.arange(0, 10).unsqueeze(0),
              "labels": torch.randint(1, 99, (2, 10), generator=g), "use_cache": False}
    on_dev = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
    cpu(**inputs).loss.backward()
    dev(**on_dev).loss.backward()
    eager = {n: p.grad.cpu() for n, p in dev.named_parameters()}
    dev.zero_grad()
    loss = torch.compile(dev, fullgraph=True, mode="reduce-overhead")(**on_dev).loss
    loss.backward()
    for (n, p), q in zip(dev.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.grad.cpu(), eager[n], rtol=1e-4, atol=1e-4)
        assert_close_cpu(p.grad, q.grad, rtol=1e-4, atol=1e-4)


# Transformers' generation compile tests (tests/generation/test_utils.py there:
# test_generate_compile_model_forward_fullgraph, test_generate_compilation_all_outputs)
# on tpu: generate() compiles the decoding step with the default backend when the model
# has a static cache and a CompileConfig (`_compile_all_devices` is their switch for
# devices Transformers does not auto-compile on).
_GEN_FAMILIES = ["llama", *(pytest.param(t, marks=pytest.mark.slow)
                            for t in ("mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3",
                                      "olmo2", "cohere"))]


def _generative(model_type, **overrides):
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(model_type, **_SMALL, bos_token_id=1,
                                            eos_token_id=2)
    for k, v in overrides.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    cpu = transformers.AutoModelForCausalLM.from_config(cfg).eval()
    dev = transformers.AutoModelForCausalLM.from_config(cfg)
    dev.load_state_dict(cpu.state_dict())
    return cpu, dev.to("tpu").eval()


@pytest.mark.parametrize("model_type", _GEN_FAMILIES)
def test_transformers_generate_fullgraph_compiled_forward(model_type):
    """CompileConfig(fullgraph=True, dynamic=False): a second batch of the same shape
    reuses the compiled step (fail_on_recompile); tokens and scores equal eager
    generate with a dynamic cache on tpu, and the CPU's."""
    from transformers import CompileConfig
    from transformers.cache_utils import StaticCache
    cpu, dev = _generative(model_type)
    ids = torch.randint(3, 99, (4, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # left padding in the first batch
    batches = [dict(input_ids=ids[i:i + 2], attention_mask=mask[i:i + 2]) for i in (0, 2)]
    config = CompileConfig(fullgraph=True, dynamic=False)
    config._compile_all_devices = True
    kw = dict(use_cache=True, do_sample=False, max_new_tokens=5, return_dict_in_generate=True,
              output_scores=True, compile_config=config)
    torch.compiler.reset()
    on_dev = [{k: v.to("tpu") for k, v in b.items()} for b in batches]
    with torch.no_grad(), torch.compiler.set_stance("force_eager"):
        eager = [dev.generate(**b, **kw) for b in on_dev]
    with torch.no_grad():
        first = dev.generate(**on_dev[0], **kw, cache_implementation="static")
        with torch.compiler.set_stance("fail_on_recompile"):
            second = dev.generate(**on_dev[1], **kw, cache_implementation="static")
        ref = [cpu.generate(**b, **kw) for b in batches]
    assert isinstance(first.past_key_values, StaticCache) and hasattr(dev, "_compiled_call")
    for got, want, cpu_out in zip((first, second), eager, ref):
        assert torch.equal(got.sequences.cpu(), want.sequences.cpu())
        assert torch.equal(got.sequences.cpu(), cpu_out.sequences)
        for a, b, c in zip(got.scores, want.scores, cpu_out.scores):
            torch.testing.assert_close(a.cpu(), b.cpu(), rtol=1e-4, atol=1e-4)
            assert_close_cpu(a, c, rtol=1e-4, atol=1e-4)
    assert any(r["kind"] == "inductor" for r in torch_tpu.debug.compiled_graphs())


@pytest.mark.parametrize("model_type", _GEN_FAMILIES)
def test_transformers_generate_compiled_all_outputs(model_type):
    """The default CompileConfig (inductor, reduce-overhead) with every output generate
    can return (attentions, hidden states, scores, logits), eager attention; the
    tokens equal the CPU's."""
    from transformers import CompileConfig
    cpu, dev = _generative(model_type, _attn_implementation="eager")
    config = CompileConfig()
    config._compile_all_devices = True
    dev.generation_config.compile_config = config
    dev.generation_config.cache_implementation = "static"
    ids = torch.randint(3, 99, (2, 7), generator=torch.Generator().manual_seed(0))
    kw = dict(do_sample=False, num_beams=1, max_new_tokens=4, min_new_tokens=4,
              output_attentions=True, output_hidden_states=True, output_scores=True,
              output_logits=True, return_dict_in_generate=True, use_cache=True)
    torch.compiler.reset()
    with torch.no_grad():
        out = dev.generate(ids.to("tpu"), attention_mask=torch.ones_like(ids).to("tpu"), **kw)
        ref = cpu.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    assert hasattr(dev, "_compiled_call")
    n_layers = _SMALL["num_hidden_layers"]
    assert len(out.scores) == len(out.logits) == len(out.attentions) == 4
    assert all(len(step) == n_layers for step in out.attentions)
    assert all(len(step) == n_layers + 1 for step in out.hidden_states)
    assert torch.equal(out.sequences.cpu(), ref.sequences)
    for a, b in zip(out.logits, ref.logits):
        assert_close_cpu(a, b, rtol=1e-4, atol=1e-4)


def test_dynamic_shapes_training_matches_cpu():
    # dynamic=True: sizes are graph inputs, and the forward graph hands sizes of its
    # intermediates to the backward graph (recomputed outside the one program).
    torch.manual_seed(0)
    cpu, dev = Block(), Block()
    dev.load_state_dict(cpu.state_dict())
    dev.to("tpu")
    fn = torch.compile(dev, dynamic=True)
    for t in (3, 5):
        x = torch.randn(2, t, 32)
        out = fn(x.to("tpu"))
        out.square().mean().backward()
        ref = cpu(x)
        ref.square().mean().backward()
        assert_close_cpu(out, ref, **TOL)
        assert_close_cpu(dev.qkv.weight.grad, cpu.qkv.weight.grad, **TOL)


def test_importing_torch_tpu_does_not_import_inductor():
    # Registration waits for inductor's registry module to be imported (inductor_hook.py).
    r = run_python("""
        import sys, torch, torch_tpu
        print("INDUCTOR", "torch._inductor.codegen.common" in sys.modules)
        from torch._inductor.codegen import common
        from torch_tpu.dynamo.inductor_backend import TpuScheduling
        print("REGISTERED", common.get_scheduling_for_device("tpu") is TpuScheduling)
    """)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "INDUCTOR False" in r.stdout and "REGISTERED True" in r.stdout, r.stdout

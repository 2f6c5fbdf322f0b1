"""The examples' kernels: the Pallas causal attention of examples/mingpt (forward and
backward kernels, interpret mode) and the fused RMSNorm + matmul in JAX of
examples/llama, forward and backward on tpu against PyTorch references on the CPU,
and inside the models they go into."""
import os
import sys

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from conftest import assert_close_cpu

pytest.importorskip("jax")
pytest.importorskip("jax.experimental.pallas")
sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from examples.llama.jax_kernels import fuse_rms_norm_matmul, rms_norm_matmul  # noqa: E402
from examples.mingpt.pallas_attention import causal_attention  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)


def _grads_match(run_dev, run_ref, inputs, **tol):
    """run(*inputs) on tpu and on the CPU: outputs and input gradients agree."""
    ref_in = [x.clone().requires_grad_() for x in inputs]
    dev_in = [x.to("tpu").requires_grad_() for x in inputs]
    ref, out = run_ref(*ref_in), run_dev(*dev_in)
    assert_close_cpu(out, ref, **tol)
    cot = torch.randn_like(ref)
    ref.backward(cot)
    out.backward(cot.to("tpu"))
    for d, r in zip(dev_in, ref_in):
        assert_close_cpu(d.grad, r.grad, **tol)


def _rms_ref(x, g, w, eps):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * g) @ w.T


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_pallas_attention_matches_sdpa(mode):
    # 48 positions: three query blocks of the forward kernel, causal across blocks.
    q, k, v = (torch.randn(2, 3, 48, 8) for _ in range(3))
    with torch_tpu.execution_mode(mode):
        _grads_match(causal_attention,
                     lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
                     (q, k, v), **TOL)


def test_pallas_attention_gradcheck_float64():
    q, k, v = (torch.randn(1, 2, 16, 4, dtype=torch.float64, device="tpu", requires_grad=True)
               for _ in range(3))
    assert torch.autograd.gradcheck(causal_attention, (q, k, v))


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_rms_norm_matmul_matches_reference(mode):
    x, g, w = torch.randn(2, 5, 16), torch.randn(16), torch.randn(24, 16)
    with torch_tpu.execution_mode(mode):
        _grads_match(lambda *a: rms_norm_matmul(*a, eps=1e-5),
                     lambda *a: _rms_ref(*a, 1e-5), (x, g, w), rtol=1e-4, atol=1e-4)


def test_rms_norm_matmul_gradcheck_float64():
    args = [torch.randn(*s, dtype=torch.float64, device="tpu", requires_grad=True)
            for s in ((3, 6), (6,), (4, 6))]
    assert torch.autograd.gradcheck(lambda *a: rms_norm_matmul(*a, eps=1e-3), args)


def test_fused_llama_matches_stock_model_on_cpu():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=32)
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(cfg)
    dev = transformers.LlamaForCausalLM(cfg)
    dev.load_state_dict(ref.state_dict())
    fuse_rms_norm_matmul(dev).to("tpu")
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    ref_out = ref(input_ids=ids, labels=ids)
    out = dev(input_ids=ids.to("tpu"), labels=ids.to("tpu"))
    assert_close_cpu(out.logits, ref_out.logits, rtol=1e-4, atol=1e-4)
    ref_out.loss.backward()
    out.loss.backward()
    ref_grads = dict(ref.named_parameters())
    fused = {"mlp.norm.": "post_attention_layernorm.", "mlp.mlp.": "mlp.",
             "lm_head.norm.": "model.norm.", "lm_head.head.": "lm_head."}
    for name, p in dev.named_parameters():
        for a, b in fused.items():
            name = name.replace(a, b)
        assert_close_cpu(p.grad, ref_grads[name].grad, rtol=1e-4, atol=1e-4)


def test_kernels_in_a_compiled_graph_match_and_do_not_break_it():
    from torch._dynamo.utils import counters
    counters.clear()
    torch._dynamo.reset()

    def f(q, k, v, w):
        a = causal_attention(q, k, v)
        return rms_norm_matmul(a, torch.ones(8, device=a.device), w)

    q, k, v = (torch.randn(1, 2, 16, 8) for _ in range(3))
    w = torch.randn(5, 8)
    out = torch.compile(f, backend="tpu", fullgraph=True)(*(t.to("tpu") for t in (q, k, v, w)))
    want = _rms_ref(F.scaled_dot_product_attention(q, k, v, is_causal=True), torch.ones(8), w,
                    1e-6)
    assert_close_cpu(out, want, rtol=1e-4, atol=1e-4)
    assert sum(counters["graph_break"].values()) == 0
    torch._dynamo.reset()

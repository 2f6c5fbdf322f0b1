"""The MoE method registered for vLLM on tpu (integrations/vllm/fused_moe.py): routing
and expert products on the device equal a per-token loop on the CPU, with no op falling
back to the CPU."""
import pytest

pytest.importorskip("vllm", reason="vLLM lives in .venv-vllm (bash scripts/install.sh vllm)")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch_tpu  # noqa: E402
from vllm.model_executor.custom_op import op_registry_oot  # noqa: E402

from torch_tpu.integrations.vllm import fused_moe  # noqa: E402


def _reference(x, w13, w2, logits, top_k):
    probs = torch.softmax(logits, -1)
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        w, ids = torch.topk(probs[t], top_k)
        w = w / w.sum()
        for k in range(top_k):
            gate, up = (w13[ids[k]] @ x[t]).chunk(2)
            out[t] += w[k] * (w2[ids[k]] @ (F.silu(gate) * up))
    return out


def test_registered_for_out_of_tree_platforms():
    assert op_registry_oot["UnquantizedFusedMoEMethod"] is fused_moe.TpuUnquantizedFusedMoEMethod


@pytest.mark.parametrize("tokens", [1, 5, 16])
def test_experts_on_tpu_equal_cpu_loop(tokens):
    g = torch.Generator().manual_seed(tokens)
    E, H, I, top_k = 6, 32, 24, 2
    x = torch.randn(tokens, H, generator=g)
    w13 = torch.randn(E, 2 * I, H, generator=g) / H ** 0.5
    w2 = torch.randn(E, H, I, generator=g) / I ** 0.5
    logits = torch.randn(tokens, E, generator=g)
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    weights, ids = fused_moe.route(logits.to("tpu"), top_k, renormalize=True)
    got = fused_moe.experts(x.to("tpu"), w13.to("tpu"), w2.to("tpu"), weights, ids).cpu()
    assert torch_tpu.debug.metrics()["cpu_fallback_counts"] == before
    torch.testing.assert_close(got, _reference(x, w13, w2, logits, top_k),
                               rtol=1e-4, atol=1e-4)

"""Mixture-of-experts layers (Qwen3-MoE, Mixtral...) on the tpu device.

vLLM's unquantized MoE method picks a kernel per platform (CUDA, CPU, XPU) and has
none for out-of-tree platforms. vLLM's extension point for that is
`CustomOp.register_oot`: registered under the in-tree class name, our subclass is
instantiated wherever vLLM builds an `UnquantizedFusedMoEMethod`.

It is monolithic (takes the router logits and routes itself) because vLLM's routers
call its own C++ top-k kernels, which have no tpu implementation. Everything here is
plain PyTorch ops that the registry lowers: softmax/top-k routing, then for each
(token, chosen expert) pair its expert's weights gathered and applied with bmm. The
gather costs memory of T*top_k expert weight matrices per layer, fine for decode and
small batches; a grouped GEMM over tokens sorted by expert would avoid it.
"""
import torch
import torch.nn.functional as F
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import (
    UnquantizedFusedMoEMethod)


@UnquantizedFusedMoEMethod.register_oot
class TpuUnquantizedFusedMoEMethod(UnquantizedFusedMoEMethod):

    @property
    def is_monolithic(self) -> bool:
        return True

    def apply_monolithic(self, layer, x, router_logits, input_ids=None):
        _check_supported(layer)
        weights, ids = route(router_logits, layer.top_k, layer.renormalize)
        return experts(x, layer.w13_weight, layer.w2_weight, weights, ids)


def _check_supported(layer) -> None:
    unsupported = {
        "grouped top-k routing": layer.use_grouped_topk,
        "custom routing functions": layer.custom_routing_function is not None,
        "scoring other than softmax": layer.scoring_func != "softmax",
        "expert score correction bias": layer.e_score_correction_bias is not None,
        "expert parallelism (expert_map)": layer.expert_map is not None,
        "router weights applied on the input": layer.apply_router_weight_on_input,
        "expert biases": layer.moe_config.has_bias,
        f"activation {layer.activation}": layer.activation != MoEActivation.SILU,
        "routed scaling factor": layer.routed_scaling_factor not in (None, 1.0),
    }
    for what, bad in unsupported.items():
        if bad:
            raise NotImplementedError(f"MoE on tpu does not support {what}")


def route(router_logits: torch.Tensor, top_k: int, renormalize: bool):
    """Softmax over experts, the top_k largest per token (weights float32, ids int64)."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def experts(x, w13, w2, weights, ids):
    """sum_k weights[t, k] * w2[e] @ (silu(gate) * up)(w13[e] @ x[t]), e = ids[t, k].

    x [T, H]; w13 [E, 2I, H] (gate rows then up rows); w2 [E, H, I]."""
    T, H = x.shape
    k = ids.shape[1]
    flat = ids.reshape(-1)                                   # [T*k]
    xk = x.repeat_interleave(k, dim=0).unsqueeze(-1)         # [T*k, H, 1]
    gate_up = torch.bmm(w13[flat], xk).squeeze(-1)           # [T*k, 2I]
    gate, up = gate_up.chunk(2, dim=-1)
    h = (F.silu(gate) * up).unsqueeze(-1)                    # [T*k, I, 1]
    out = torch.bmm(w2[flat], h).squeeze(-1)                 # [T*k, H]
    out = out.view(T, k, H) * weights.to(out.dtype).unsqueeze(-1)
    return out.sum(dim=1)

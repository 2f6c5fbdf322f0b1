"""Mixture-of-experts models (Mixtral, Qwen2-MoE) run on tpu with no CPU fallback:
routing counts tokens per expert with torch.histc on integer ids (lowered natively,
csrc/lower/histogram.cc) and the experts run as grouped matmuls (Transformers picks
its grouped_mm path on tpu). Forward and backward against the CPU."""
import pytest
import torch
import torch_tpu
import transformers

COMMON = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
CONFIGS = {
    "mixtral": lambda: transformers.MixtralConfig(**COMMON, num_local_experts=4, num_experts_per_tok=2),
    "qwen2_moe": lambda: transformers.Qwen2MoeConfig(
        **COMMON, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32),
}


def cpu_reference(arch):
    """A seeded tiny model's CPU forward and gradients, then the model moved to tpu:
    (model, ids, CPU output, CPU gradients by parameter name)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(CONFIGS[arch]())
    ids = torch.randint(0, 64, (2, 12))
    ref = model(ids, labels=ids)
    ref.loss.backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return model.to("tpu"), ids, ref, ref_grads


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_moe_forward_backward_matches_cpu_without_fallback(arch, mode):
    model, ids, ref, ref_grads = cpu_reference(arch)
    torch_tpu.set_execution_mode(mode)
    try:
        torch_tpu.debug.reset_metrics()
        out = model(ids.to("tpu"), labels=ids.to("tpu"))
        out.loss.backward()
        torch.tpu.synchronize()
        assert torch_tpu.debug.metrics()["cpu_fallback_counts"] == {}
    finally:
        torch_tpu.set_execution_mode("strict_eager")
    torch.testing.assert_close(out.logits.cpu(), ref.logits, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.loss.cpu(), ref.loss, rtol=1e-5, atol=1e-5)
    assert ref_grads
    for n, p in model.named_parameters():
        if n in ref_grads:
            torch.testing.assert_close(p.grad.cpu(), ref_grads[n], rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_moe_compiled_float32_matches_cpu(arch):
    """torch.compile(backend="tpu") traces the experts' grouped_mm in float32 (tpu's
    AutogradPrivateUse1 decomposition, csrc/aten/grouped_mm_kernel.cc, instead of PyTorch's
    bfloat16-only meta function)."""
    model, ids, ref, ref_grads = cpu_reference(arch)
    compiled = torch.compile(model, backend="tpu")
    torch_tpu.debug.reset_metrics()
    out = compiled(ids.to("tpu"), labels=ids.to("tpu"))
    out.loss.backward()
    assert torch_tpu.debug.metrics()["cpu_fallback_counts"] == {}
    torch.testing.assert_close(out.logits.cpu(), ref.logits, rtol=1e-4, atol=1e-5)
    for n, p in model.named_parameters():
        if n in ref_grads:
            torch.testing.assert_close(p.grad.cpu(), ref_grads[n], rtol=1e-4, atol=1e-5, msg=n)

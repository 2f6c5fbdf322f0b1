"""A fused RMSNorm + matmul written in JAX, registered as the PyTorch op
`torch.ops.llama_example.rms_norm_matmul` with torch_tpu.kernels.jax_op, and the
modules that put it into a Transformers Llama (examples/llama/train.py --kernels jax;
docs/kernels.md).

Llama normalises the residual stream right before a matmul twice: each decoder
layer's `post_attention_layernorm` feeds the MLP's gate and up projections, and the
final `model.norm` feeds `lm_head`. `fuse_rms_norm_matmul(model)` replaces each
such pair by one module that calls the kernel, keeping the same parameters (the norm
and the linear layers become its children), so the model trains, saves and generates
as before. One difference: with output_hidden_states the last hidden state is
returned before the final norm (the norm now happens inside lm_head).
"""
import jax
import jax.numpy as jnp
import torch.nn as nn

from torch_tpu.kernels import jax_op


@jax_op("llama_example::rms_norm_matmul")
def rms_norm_matmul(x, g, w, *, eps: float = 1e-6):
    """(RMSNorm(x) * g) @ w.T, normalising in float32 (float64 for float64 inputs) as
    LlamaRMSNorm does: the norm and the matmul are one function, so the normalised
    activations feed the matmul without being written out as a separate result."""
    xf = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    normed = (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)).astype(x.dtype)
    return jnp.matmul(g * normed, w.T)


class NormedMLP(nn.Module):
    """post_attention_layernorm + LlamaMLP, the gate and up projections fused with the norm."""

    def __init__(self, norm, mlp):
        super().__init__()
        if mlp.gate_proj.bias is not None:
            raise ValueError("fuse_rms_norm_matmul: MLPs with biases are not supported")
        self.norm, self.mlp = norm, mlp

    def forward(self, x):
        eps, g = self.norm.variance_epsilon, self.norm.weight
        gate = rms_norm_matmul(x, g, self.mlp.gate_proj.weight, eps=eps)
        up = rms_norm_matmul(x, g, self.mlp.up_proj.weight, eps=eps)
        return self.mlp.down_proj(self.mlp.act_fn(gate) * up)


class NormedHead(nn.Module):
    """The final norm + lm_head (tied or not: lm_head is kept as it is)."""

    def __init__(self, norm, head):
        super().__init__()
        if head.bias is not None:
            raise ValueError("fuse_rms_norm_matmul: an lm_head with a bias is not supported")
        self.norm, self.head = norm, head

    def forward(self, x):
        return rms_norm_matmul(x, self.norm.weight, self.head.weight,
                               eps=self.norm.variance_epsilon)


def fuse_rms_norm_matmul(model):
    """Rewrites a LlamaForCausalLM (or a model with its layout) in place to use the
    fused kernel; returns it."""
    for layer in model.model.layers:
        layer.mlp = NormedMLP(layer.post_attention_layernorm, layer.mlp)
        layer.post_attention_layernorm = nn.Identity()
    model.lm_head = NormedHead(model.model.norm, model.lm_head)
    model.model.norm = nn.Identity()
    return model

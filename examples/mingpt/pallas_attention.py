"""Causal self-attention written in Pallas, registered as the PyTorch op
`torch.ops.mingpt_example.causal_attention` with torch_tpu.kernels.jax_op
(examples/mingpt/train.py --attention pallas; docs/kernels.md).

The forward kernel runs one program per (batch*head, block of queries): it loads its
query block and the whole key/value sequence, masks the scores above the diagonal,
and writes the output and the softmax's log-sum-exp. The backward kernel (one program
per batch*head) recomputes the probabilities from that log-sum-exp instead of keeping
the T x T matrix, as flash attention does. `jax.custom_vjp` joins the two, so the
`jax.vjp` that jax_op builds its backward op from calls the backward kernel.

Pallas runs in interpret mode here: it lowers the kernel to plain StableHLO (a loop
over the grid), which the program torch_tpu builds inlines and any PJRT plugin (the
CPU one included) compiles. Native Mosaic kernels need JAX lowering for a TPU.
"""
import functools
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from torch_tpu.kernels import jax_op

INTERPRET = True
BLOCK_Q = 16  # queries per program of the forward kernel (the whole sequence if shorter)


def _acc(dtype):
    """The accumulation type: float32, or float64 for float64 inputs (gradcheck)."""
    return jnp.promote_types(dtype, jnp.float32)


def _causal_scores(q, k, first_row, scale):
    """q @ k.T * scale in the accumulation type, -inf where a key comes after its query."""
    acc = _acc(q.dtype)
    s = jnp.dot(q.astype(acc), k.astype(acc).T) * scale
    rows = first_row + jax.lax.broadcasted_iota(jnp.int32, s.shape, 0)
    cols = jax.lax.broadcasted_iota(jnp.int32, s.shape, 1)
    return jnp.where(cols <= rows, s, -jnp.inf)


def _forward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, *, scale, block_q):
    s = _causal_scores(q_ref[...], k_ref[...], pl.program_id(1) * block_q, scale)
    m = s.max(axis=-1, keepdims=True)
    p = jnp.exp(s - m)
    denom = p.sum(axis=-1, keepdims=True)
    o_ref[...] = (jnp.dot(p, v_ref[...].astype(p.dtype)) / denom).astype(o_ref.dtype)
    lse_ref[...] = (m + jnp.log(denom))[:, 0]


def _backward_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, do_ref, dq_ref, dk_ref, dv_ref, *,
                     scale):
    acc = _acc(q_ref.dtype)
    q, k, v, o, do = (r[...].astype(acc) for r in (q_ref, k_ref, v_ref, o_ref, do_ref))
    p = jnp.exp(_causal_scores(q, k, 0, scale) - lse_ref[...][:, None])
    dv_ref[...] = jnp.dot(p.T, do).astype(dv_ref.dtype)
    dp = jnp.dot(do, v.T)
    ds = p * (dp - (do * o).sum(axis=-1, keepdims=True)) * scale
    dq_ref[...] = jnp.dot(ds, k).astype(dq_ref.dtype)
    dk_ref[...] = jnp.dot(ds.T, q).astype(dk_ref.dtype)


def _forward(q, k, v):
    """(output, log-sum-exp) for q, k, v of shape (batch*heads, T, head_dim)."""
    bh, t, d = q.shape
    bq = min(BLOCK_Q, t)
    if t % bq:
        raise ValueError(f"sequence length {t} must be a multiple of {bq}")
    q_spec = pl.BlockSpec((None, bq, d), lambda b, i: (b, i, 0))
    kv_spec = pl.BlockSpec((None, t, d), lambda b, i: (b, 0, 0))
    return pl.pallas_call(
        functools.partial(_forward_kernel, scale=1 / math.sqrt(d), block_q=bq),
        out_shape=(jax.ShapeDtypeStruct(q.shape, q.dtype),
                   jax.ShapeDtypeStruct((bh, t), _acc(q.dtype))),
        grid=(bh, t // bq), in_specs=[q_spec, kv_spec, kv_spec],
        out_specs=(q_spec, pl.BlockSpec((None, bq), lambda b, i: (b, i))),
        interpret=INTERPRET)(q, k, v)


def _backward(q, k, v, o, lse, do):
    bh, t, d = q.shape
    seq = pl.BlockSpec((None, t, d), lambda b: (b, 0, 0))
    return pl.pallas_call(
        functools.partial(_backward_kernel, scale=1 / math.sqrt(d)),
        out_shape=tuple(jax.ShapeDtypeStruct(x.shape, x.dtype) for x in (q, k, v)),
        grid=(bh,), in_specs=[seq, seq, seq, seq, pl.BlockSpec((None, t), lambda b: (b, 0)), seq],
        out_specs=(seq, seq, seq), interpret=INTERPRET)(q, k, v, o, lse, do)


@jax.custom_vjp
def _attention(q, k, v):
    return _forward(q, k, v)[0]


def _attention_fwd(q, k, v):
    o, lse = _forward(q, k, v)
    return o, (q, k, v, o, lse)


def _attention_bwd(res, do):
    return _backward(*res, do)


_attention.defvjp(_attention_fwd, _attention_bwd)


@jax_op("mingpt_example::causal_attention")
def causal_attention(q, k, v):
    """softmax(q @ k.T / sqrt(head_dim), causal) @ v for (batch, heads, T, head_dim)
    tensors: what F.scaled_dot_product_attention(q, k, v, is_causal=True) computes."""
    b, h, t, d = q.shape
    flat = [x.reshape(b * h, t, d) for x in (q, k, v)]
    return _attention(*flat).reshape(b, h, t, d)

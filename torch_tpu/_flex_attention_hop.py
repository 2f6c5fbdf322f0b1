"""The tpu kernels of PyTorch's flex_attention higher-order ops.

`torch.ops.higher_order.flex_attention` and `flex_attention_backward` dispatch on the
key of their tensors, as any op does; these are their `PrivateUse1` kernels (and the
autocast one), registered with the HOPs' own `py_impl` extension point. Each runs
PyTorch's dense math implementation of the HOP (`sdpa_dense` / `sdpa_dense_backward`,
the CompositeExplicitAutograd kernels): the scores `q @ k^T * scale` are one full
[B, H, L, S] matrix, `score_mod` and `mask_mod` are vmapped over it, so every step is
an ordinary ATen op that the lowering registry serves, in Strict Eager, in Defer & Fuse
(one fused program) and inside a `torch.compile(backend="tpu")` graph (AOTAutograd
keeps the HOP as a node; the graph runner calls it with tpu tensors, which lands here).
Autograd goes through the HOP's own autograd kernel, whose backward calls
`flex_attention_backward`, also served here.

What the tpu kernels add to the dense math: the BlockMask's block lists are honoured.
PyTorch's math kernel evaluates `mask_mod` alone and ignores `kv_num_blocks` /
`kv_indices` / `full_kv_*`, so a BlockMask built from block lists (`BlockMask.from_kv_blocks`
without a mask_mod, or one whose lists were edited) would attend everywhere, where the
fused kernels attend only to the listed blocks. Here a position (q, k) is kept when its
block is listed as full, or listed as partial and `mask_mod` keeps it: the kernels'
semantics, computed densely (the sparsity saves no work on tpu; it is only a mask).
A BlockMask from `create_block_mask(mask_mod, ...)` gives the same result either way.
"""
import torch
from torch._C import DispatchKey
from torch.amp.autocast_mode import _cast as autocast_cast
from torch._higher_order_ops.flex_attention import (
    flex_attention,
    flex_attention_backward,
    sdpa_dense,
    sdpa_dense_backward,
)

# BlockMask.as_tuple() (flattened): (q_len, kv_len, kv_num_blocks, kv_indices,
# full_kv_num_blocks, full_kv_indices, q_num_blocks, ..., Q_BLOCK_SIZE,
# KV_BLOCK_SIZE, mask_mod). The positions from the end are the stable part.
_KV_NUM, _KV_IDX, _FULL_NUM, _FULL_IDX = 2, 3, 4, 5
# The block size of the "no mask" BlockMask flex_attention makes when none is given:
# one block covers everything.
_NO_MASK_BLOCK = 1 << 30


def _listed_blocks(num_blocks, indices, kv_blocks, batch, heads):
    """[b, h, q_blocks] counts and [b, h, q_blocks, j] kv-block lists -> a bool
    [batch, heads, q_blocks, kv_blocks] grid of the listed blocks. A compare against
    every block number rather than a scatter: no runtime index, nothing to clamp."""
    listed = torch.arange(indices.size(-1), device=indices.device) < num_blocks.unsqueeze(-1)
    block_ids = torch.arange(kv_blocks, device=indices.device, dtype=indices.dtype)
    hits = (indices.unsqueeze(-1) == block_ids) & listed.unsqueeze(-1)
    return hits.any(-2).expand(batch, heads, -1, -1)


def _mask_with_blocks(mask_mod, q_block, kv_block, n_user, has_full):
    """mask_mod restricted to the listed blocks; the grids come last in the buffers."""
    def mask(b, h, q, k, *buffers):
        user = buffers[:n_user]
        qb, kb = q // q_block, k // kv_block
        keep = buffers[n_user][b, h, qb, kb] & mask_mod(b, h, q, k, *user)
        if has_full:
            keep = keep | buffers[n_user + 1][b, h, qb, kb]
        return keep
    return mask


def _dense_block_mask(query, key, block_mask, mask_mod_other_buffers):
    """The block_mask tuple and mask buffers with the block lists folded into mask_mod."""
    q_block, kv_block, mask_mod = block_mask[-3], block_mask[-2], block_mask[-1]
    if q_block >= _NO_MASK_BLOCK and kv_block >= _NO_MASK_BLOCK:
        return block_mask, mask_mod_other_buffers
    batch, heads = query.size(0), query.size(1)
    kv_blocks = -(-key.size(-2) // kv_block)
    grids = [_listed_blocks(block_mask[_KV_NUM], block_mask[_KV_IDX], kv_blocks, batch, heads)]
    has_full = block_mask[_FULL_NUM] is not None
    if has_full:
        grids.append(_listed_blocks(block_mask[_FULL_NUM], block_mask[_FULL_IDX],
                                    kv_blocks, batch, heads))
    mask = _mask_with_blocks(mask_mod, q_block, kv_block, len(mask_mod_other_buffers), has_full)
    return (*block_mask[:-1], mask), (*mask_mod_other_buffers, *grids)


@flex_attention.py_impl(DispatchKey.PrivateUse1)
def flex_attention_tpu(query, key, value, score_mod, block_mask, scale, kernel_options,
                       score_mod_other_buffers=(), mask_mod_other_buffers=()):
    block_mask, mask_buffers = _dense_block_mask(query, key, block_mask, mask_mod_other_buffers)
    return sdpa_dense(query, key, value, score_mod, block_mask, scale, kernel_options,
                      score_mod_other_buffers, mask_buffers)


@flex_attention_backward.py_impl(DispatchKey.PrivateUse1)
def flex_attention_backward_tpu(query, key, value, out, logsumexp, grad_out, grad_logsumexp,
                                fw_graph, joint_graph, block_mask, scale, kernel_options,
                                score_mod_other_buffers=(), mask_mod_other_buffers=()):
    block_mask, mask_buffers = _dense_block_mask(query, key, block_mask, mask_mod_other_buffers)
    return sdpa_dense_backward(query, key, value, out, logsumexp, grad_out, grad_logsumexp,
                               fw_graph, joint_graph, block_mask, scale, kernel_options,
                               score_mod_other_buffers, mask_buffers)


@flex_attention.py_impl(DispatchKey.AutocastPrivateUse1)
def flex_attention_autocast_tpu(query, key, value, *args):
    """Under torch.autocast("tpu"): q, k, v in the autocast dtype, as CUDA's and the
    CPU's autocast kernels of the HOP do (attention is a lower-precision op in every
    autocast policy). Without a kernel for this key the HOP would refuse to run."""
    device_type = query.device.type
    dtype = torch.get_autocast_dtype(device_type)
    query, key, value = (autocast_cast(t, device_type, dtype) for t in (query, key, value))
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(DispatchKey.AutocastPrivateUse1)):
        return flex_attention(query, key, value, *args)

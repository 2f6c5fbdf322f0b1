"""Dense PyTorch reference for the paged KV-cache ops (`tpu::write_kv_cache_`,
`tpu::paged_attention`), with the registry ops' exact signature and semantics.

Registered under the `tpu` namespace only where the registry does not provide the ops
(an older build); tests also compare the registry ops against it.
"""
import torch


def write_kv_cache_reference(kv_cache, key, value, slot_mapping):
    """Writes key/value [T, Hkv, D] into kv_cache [2, NB, BS, Hkv, D] at their slots;
    slot -1 (padding) writes nothing. Returns kv_cache."""
    flat = kv_cache.view(2, -1, *kv_cache.shape[3:])
    valid = slot_mapping >= 0
    idx = torch.where(valid, slot_mapping, 0)
    # Padding tokens write back what slot 0 already holds (a no-op unless a real token
    # also targets slot 0, which vLLM never gives out: block 0 is its null block).
    keep = valid.view(-1, 1, 1)
    flat[0].index_put_((idx,), torch.where(keep, key, flat[0][idx]))
    flat[1].index_put_((idx,), torch.where(keep, value, flat[1][idx]))
    return kv_cache


def paged_attention_reference(query, kv_cache, block_tables, seq_lens, query_start_loc,
                              scale, sliding_window=-1, soft_cap=0.0):
    T, H, D = query.shape
    R, max_blocks = block_tables.shape
    bs, Hkv = kv_cache.shape[2], kv_cache.shape[3]
    L = max_blocks * bs
    # Each request's keys/values in context order: [R, L, Hkv, D].
    keys = kv_cache[0][block_tables.long()].reshape(R, L, Hkv, D)
    values = kv_cache[1][block_tables.long()].reshape(R, L, Hkv, D)
    t = torch.arange(T, device=query.device)
    qsl = query_start_loc.long()
    req = (t.view(-1, 1) >= qsl[1:].view(1, -1)).sum(1).clamp(max=R - 1)  # [T]
    real = t < qsl[R]
    q_len = qsl[1:] - qsl[:-1]
    pos = seq_lens.long()[req] - q_len[req] + (t - qsl[req])  # [T]
    k = keys[req].repeat_interleave(H // Hkv, dim=2)  # [T, L, H, D]
    v = values[req].repeat_interleave(H // Hkv, dim=2)
    scores = torch.einsum("thd,tlhd->thl", query.float(), k.float()) * scale
    if soft_cap > 0:
        scores = soft_cap * torch.tanh(scores / soft_cap)
    kv_pos = torch.arange(L, device=query.device).view(1, -1)
    allowed = kv_pos <= pos.view(-1, 1)
    if sliding_window > 0:
        allowed = allowed & (kv_pos > pos.view(-1, 1) - sliding_window)
    allowed = allowed & real.view(-1, 1)
    scores = scores.masked_fill(~allowed.view(T, 1, L), float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    out = torch.einsum("thl,tlhd->thd", probs, v.float())
    return out.to(query.dtype)


def register_if_missing():
    """Defines the two ops under torch.ops.tpu when this build lacks them."""
    if hasattr(torch.ops.tpu, "paged_attention"):
        return False
    lib = torch.library.Library("tpu", "FRAGMENT")
    lib.define("write_kv_cache_(Tensor(a!) kv_cache, Tensor key, Tensor value, "
               "Tensor slot_mapping) -> Tensor(a!)")
    lib.define("paged_attention(Tensor query, Tensor kv_cache, Tensor block_tables, "
               "Tensor seq_lens, Tensor query_start_loc, float scale, "
               "int sliding_window=-1, float soft_cap=0.0) -> Tensor")
    for key in ("CompositeExplicitAutograd",):
        lib.impl("write_kv_cache_", write_kv_cache_reference, key)
        lib.impl("paged_attention", paged_attention_reference, key)
    register_if_missing._lib = lib  # keep the registration alive
    return True

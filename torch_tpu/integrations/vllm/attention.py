"""Attention over the paged KV cache on the tpu device, as a vLLM attention backend.

Each layer's cache is one tensor `[2, num_blocks, block_size, num_kv_heads, head_size]`
(keys, values). A step writes the new keys/values in place (`tpu::write_kv_cache_`,
whose program aliases the cache buffer) and attends with `tpu::paged_attention`, one
call for prefill, decode and mixed batches. Both ops are lowered once in the registry.
"""
from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (AttentionBackend, AttentionImpl,
                                       AttentionMetadataBuilder, AttentionType)


@dataclass
class TpuAttentionMetadata:
    """One step's batch, already padded to its bucket by the model runner.

    query_start_loc: int32 [R+1]; seq_lens: int32 [R] (context length including the
    step's tokens, 0 for padding requests); block_tables: int32 [R, max_blocks];
    slot_mapping: int64 [T] (-1 for padding tokens).
    """
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    slot_mapping: torch.Tensor


class TpuAttentionMetadataBuilder(AttentionMetadataBuilder[TpuAttentionMetadata]):
    """Present because vLLM's interface asks for one; TpuModelRunner builds the metadata."""

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)

    def build(self, common_prefix_len, common_attn_metadata, fast_build=False):
        raise NotImplementedError("TpuModelRunner builds TpuAttentionMetadata itself")


class TpuAttentionBackend(AttentionBackend):
    # The key/value write happens inside forward (one place, in place on the cache).
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_name() -> str:
        return "TORCH_TPU_PAGED"

    @staticmethod
    def get_impl_cls():
        return TpuAttentionImpl

    @staticmethod
    def get_builder_cls():
        return TpuAttentionMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @classmethod
    def supports_sliding_window(cls) -> bool:
        return True

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


class TpuAttentionImpl(AttentionImpl[TpuAttentionMetadata]):
    def __init__(self, num_heads, head_size, scale, num_kv_heads=None, alibi_slopes=None,
                 sliding_window=None, kv_cache_dtype="auto", logits_soft_cap=None,
                 attn_type=AttentionType.DECODER, kv_sharing_target_layer_name=None,
                 sinks=None, **kwargs):
        if alibi_slopes is not None:
            raise NotImplementedError("ALiBi is not supported by torch_tpu's attention")
        if sinks is not None:
            raise NotImplementedError("attention sinks are not supported by torch_tpu's attention")
        if attn_type != AttentionType.DECODER:
            raise NotImplementedError(f"{attn_type} attention is not supported on tpu")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.sliding_window = -1 if sliding_window is None else int(sliding_window)
        self.soft_cap = float(logits_soft_cap or 0.0)
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type

    def forward(self, layer, query, key, value, kv_cache, attn_metadata, output,
                output_scale=None, output_block_scale=None):
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported on tpu")
        if attn_metadata is None:  # vLLM's profiling run: no cache bound yet
            return output.zero_()
        m = attn_metadata
        if self.kv_sharing_target_layer_name is None and key is not None:
            torch.ops.tpu.write_kv_cache_(kv_cache, key, value, m.slot_mapping)
        out = torch.ops.tpu.paged_attention(query, kv_cache, m.block_tables, m.seq_lens,
                                            m.query_start_loc, self.scale,
                                            self.sliding_window, self.soft_cap)
        output.copy_(out.view(output.shape))
        return output

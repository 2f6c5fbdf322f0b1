"""int4 weight-only quantisation on tpu: two 4-bit values per uint8 byte, group-wise
asymmetric scales and zero points (torchao's int4 weight-only scheme: per group
scale = (max - min) / 15, zero = min + 8 * scale, w ~ (q - 8) * scale + zero).

The matmul dequantises inside the program with ordinary ATen ops (mask, shift, stack,
scale, linear), which the lowering registry already covers, so Defer & Fuse and
torch.compile fuse the unpacking into the product's program; nothing runs on the CPU.
"""
from dataclasses import dataclass

import torch
from torchao.core.config import AOBaseConfig
from torchao.quantization.transform_module import register_quantize_module_handler
from torchao.utils import TorchAOBaseTensor

aten = torch.ops.aten
GROUP_SIZES = (32, 64, 128, 256)


@dataclass
class TpuInt4WeightOnlyConfig(AOBaseConfig):
    """int4 weight-only for tpu linear layers; `group_size` in 32/64/128/256 and a
    divisor of the layer's in_features."""
    group_size: int = 128

    def __post_init__(self):
        if self.group_size not in GROUP_SIZES:
            raise ValueError(f"TpuInt4WeightOnlyConfig: group_size must be one of {GROUP_SIZES}, "
                             f"got {self.group_size}")


def quantize_int4(w, group_size):
    """float weight [N, K] -> (packed uint8 [N, K/2], scale [N, K/g], zero [N, K/g]).
    Element 2i of a row goes in the low nibble, 2i+1 in the high one."""
    n, k = w.shape
    groups = w.float().reshape(n, k // group_size, group_size)
    lo, hi = groups.amin(-1), groups.amax(-1)
    scale = ((hi - lo).clamp(min=1e-6) / 15).to(w.dtype)
    if scale.dtype == torch.float32:
        # Keep 20 significant bits so that (q - 8) * scale (|q - 8| <= 8, 4 bits) is exact
        # in float32: then dequantisation gives the same bits whether or not the compiler
        # contracts its multiply-add into an FMA (Defer & Fuse, torch.compile) or not
        # (Strict Eager, the CPU). bfloat16/float16 scales have 8/11 bits and need nothing.
        scale = (scale.view(torch.int32) & -16).view(torch.float32)
    zero = (lo + 8 * scale.float()).to(w.dtype)
    lo_c = (zero.float() - 8 * scale.float()).unsqueeze(-1)
    q = ((groups - lo_c) / scale.float().unsqueeze(-1)).round().clamp(0, 15).to(torch.uint8)
    q = q.reshape(n, k // 2, 2)
    packed = q[..., 0] | (q[..., 1] << 4)
    return packed.contiguous(), scale.contiguous(), zero.contiguous()


def dequantize_int4(packed, scale, zero, group_size):
    n = packed.shape[0]
    q = torch.stack([packed & 0x0F, packed >> 4], dim=-1).reshape(n, -1, group_size)
    # In float32 whatever the weights' dtype: the product is exact (see quantize_int4),
    # the sum rounds once, and then to the weights' dtype.
    w = (q.float() - 8) * scale.float().unsqueeze(-1) + zero.float().unsqueeze(-1)
    return w.reshape(n, -1).to(scale.dtype)


class Int4PackedTensor(TorchAOBaseTensor):
    """A [N, K] linear weight stored as packed int4 (see module docstring)."""
    tensor_data_names = ["qdata", "scale", "zero_point"]
    tensor_attribute_names = ["group_size", "shape"]

    def __new__(cls, qdata, scale, zero_point, group_size, shape):
        return torch.Tensor._make_wrapper_subclass(
            cls, shape, device=qdata.device, dtype=scale.dtype, requires_grad=False)

    def __init__(self, qdata, scale, zero_point, group_size, shape):
        super().__init__()
        self.qdata, self.scale, self.zero_point = qdata, scale, zero_point
        self.group_size = group_size

    @classmethod
    def from_hp(cls, w, group_size):
        if w.dim() != 2:
            raise ValueError(f"int4 weight-only quantises 2-D linear weights, got shape {tuple(w.shape)}")
        if group_size not in GROUP_SIZES:
            raise ValueError(f"int4 group_size must be one of {GROUP_SIZES}, got {group_size}")
        if w.shape[1] % group_size:
            raise ValueError(f"int4 weight-only: in_features {w.shape[1]} is not divisible by "
                             f"group_size {group_size}")
        if not w.is_floating_point():
            raise ValueError(f"int4 weight-only needs a floating-point weight, got {w.dtype}")
        return cls(*quantize_int4(w, group_size), group_size, w.shape)

    def dequantize(self, output_dtype=None):
        w = dequantize_int4(self.qdata, self.scale, self.zero_point, self.group_size)
        return w if output_dtype is None else w.to(output_dtype)

    def _quantization_type(self):
        return f"shape={tuple(self.shape)}, group_size={self.group_size}, device={self.device}"


implements = Int4PackedTensor.implements
implements_torch_function = Int4PackedTensor.implements_torch_function


@implements(aten.linear.default)
@implements_torch_function(torch.nn.functional.linear)
def _linear(func, types, args, kwargs):
    x, w = args[0], args[1]
    bias = args[2] if len(args) > 2 else kwargs.get("bias")
    return torch.nn.functional.linear(x, w.dequantize().to(x.dtype), bias)


@implements(aten.t.default)
def _t(func, types, args, kwargs):
    # linear's decomposition (torch.compile) asks for weight.t(); hand back the dequantised
    # transpose, computed in the same program.
    return args[0].dequantize().t()


@register_quantize_module_handler(TpuInt4WeightOnlyConfig)
def _int4_transform(module, config, *, parameter_name="weight"):
    weight = getattr(module, parameter_name)
    q = Int4PackedTensor.from_hp(weight.detach(), config.group_size)
    setattr(module, parameter_name, torch.nn.Parameter(q, requires_grad=False))
    return module

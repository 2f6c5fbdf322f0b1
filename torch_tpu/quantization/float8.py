"""float8 dynamic-activation / float8-weight inference on tpu.

torchao's own config refuses any device but CUDA sm89+/MI300/XPU
(`torchao.float8.inference._check_hardware_support`). This config is the same dataclass
with a handler that builds the same `Float8Tensor` weights without that check: the
weight is quantised once, activations are quantised per call, and the product runs
through `torch._scaled_mm` (csrc/lower/scaled_mm.cc).
"""
import types
from functools import partial

import torch
from torchao.quantization.utils import _fp8_mm_compat
from torchao.quantization import quant_api
from torchao.quantization.granularity import PerRow, PerTensor
from torchao.quantization.quantize_.common import KernelPreference
from torchao.quantization.quantize_.workflows import Float8Tensor, QuantizeTensorToFloat8Kwargs
from torchao.quantization.transform_module import register_quantize_module_handler


class TpuFloat8DynamicActivationFloat8WeightConfig(quant_api.Float8DynamicActivationFloat8WeightConfig):
    """torchao's `Float8DynamicActivationFloat8WeightConfig` for tpu: the same fields;
    `granularity=PerTensor()` (default) or `PerRow()` (bfloat16 weights, as torchao)."""


@register_quantize_module_handler(TpuFloat8DynamicActivationFloat8WeightConfig)
def _float8_transform(module, config, *, parameter_name="weight"):
    weight = getattr(module, parameter_name)
    activation_granularity, weight_granularity = config.granularity
    if not all(isinstance(g, (PerTensor, PerRow)) for g in config.granularity) or \
            type(activation_granularity) is not type(weight_granularity):
        raise ValueError(f"tpu float8 inference supports PerTensor or PerRow granularity, "
                         f"got {config.granularity}")
    if weight.dim() != 2:
        raise ValueError(f"tpu float8 inference quantises 2-D linear weights, got shape {tuple(weight.shape)}")
    if not _fp8_mm_compat(weight):
        # torchao leaves such weights (dims not multiples of 16) unquantised; so do we.
        return module
    if isinstance(weight_granularity, PerRow) and weight.dtype != torch.bfloat16:
        raise ValueError("PerRow float8 quantisation needs bfloat16 weights (as in torchao), "
                         f"got {weight.dtype}")
    act_kwargs = QuantizeTensorToFloat8Kwargs(
        config.activation_dtype, activation_granularity,
        hp_value_lb=config.activation_value_lb, hp_value_ub=config.activation_value_ub,
        kernel_preference=config.kernel_preference)
    qweight = Float8Tensor.from_hp(
        weight, float8_dtype=config.weight_dtype, granularity=weight_granularity,
        mm_config=config.mm_config, kernel_preference=config.kernel_preference,
        act_quant_kwargs=act_kwargs)
    setattr(module, parameter_name, torch.nn.Parameter(qweight, requires_grad=False))
    module.extra_repr = types.MethodType(
        partial(quant_api._module_extra_repr, original_extra_repr=module.extra_repr,
                parameter_name=parameter_name), module)
    return module

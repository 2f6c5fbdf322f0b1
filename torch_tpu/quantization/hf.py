"""Transformers integration that also saves and reloads torch_tpu's quantised weights.

    from torch_tpu.quantization import TpuInt4WeightOnlyConfig
    from torch_tpu.quantization.hf import TpuTorchAoConfig
    model = AutoModelForCausalLM.from_pretrained(
        path, quantization_config=TpuTorchAoConfig(TpuInt4WeightOnlyConfig(128)), device_map="tpu")
    model.save_pretrained(out)                                   # safetensors
    model = AutoModelForCausalLM.from_pretrained(out, device_map="tpu")

Transformers' own `TorchAoConfig` quantises with our configs while loading, but cannot
save them: torchao's safetensors flattening (`flatten_tensor_state_dict`) and its
config decoding (`config_from_dict`) accept only torchao's own classes, by name.
`TpuTorchAoConfig` is `TorchAoConfig` under its own `quant_method` ("torch_tpu"),
registered with Transformers' extension points (`register_quantization_config`,
`register_quantizer`); its quantizer is Transformers' torchao quantizer that also
flattens `Int4PackedTensor` to plain tensors plus JSON metadata (torchao's format:
`<module>._weight_qdata`, `_scale`, `_zero_point`) and rebuilds it when loading, and
its config decodes our `Tpu...` configs as well as torchao's. Any torchao config works
with it too. Importing this module registers both (and imports Transformers).
"""
import json
import types

import torch
from torchao.core.config import config_from_dict
from torchao.prototype.safetensors.safetensors_support import (
    flatten_tensor_state_dict, unflatten_tensor_state_dict)
from transformers import TorchAoConfig
from transformers.integrations.torchao import TorchAoDeserialize, _linear_extra_repr
from transformers.quantizers import register_quantization_config, register_quantizer
from transformers.quantizers.quantizer_torchao import TorchAoHfQuantizer
from transformers.quantizers.quantizers_utils import get_module_from_name

from .float8 import TpuFloat8DynamicActivationFloat8WeightConfig
from .int4 import Int4PackedTensor, TpuInt4WeightOnlyConfig

QUANT_METHOD = "torch_tpu"
_CONFIGS = {c.__name__: c for c in (TpuInt4WeightOnlyConfig, TpuFloat8DynamicActivationFloat8WeightConfig)}
_TENSORS = {"Int4PackedTensor": Int4PackedTensor}


def _decode(value):
    """A JSON value of a config field: torchao's encoding of nested objects, or plain."""
    if isinstance(value, dict) and "_type" in value and "_data" in value:
        return _config_from_dict(value)
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _config_from_dict(data):
    cls = _CONFIGS.get(data.get("_type"))
    if cls is None:
        return config_from_dict(data)
    return cls(**{k: _decode(v) for k, v in data["_data"].items()})


@register_quantization_config(QUANT_METHOD)
class TpuTorchAoConfig(TorchAoConfig):
    """`transformers.TorchAoConfig` whose models save and reload with torch_tpu's
    quantisation configs (`TpuInt4WeightOnlyConfig`, ...) as well as torchao's."""

    def __init__(self, quant_type, **kwargs):
        super().__init__(quant_type, **kwargs)
        self.quant_method = QUANT_METHOD

    @classmethod
    def from_dict(cls, config_dict, return_unused_kwargs=False, **kwargs):
        config_dict = dict(config_dict)
        quant_type = config_dict.pop("quant_type")
        config_dict.pop("quant_method", None)
        if set(quant_type) != {"default"}:
            raise ValueError(f"TpuTorchAoConfig: expected quant_type {{'default': ...}}, got keys {list(quant_type)}")
        return cls(_config_from_dict(quant_type["default"]), **config_dict)


def _flatten(state_dict):
    """torchao's flattening, plus Int4PackedTensor in torchao's metadata format."""
    ours = {k: v for k, v in state_dict.items() if type(v).__name__ in _TENSORS}
    tensors, metadata = flatten_tensor_state_dict({k: v for k, v in state_dict.items() if k not in ours})
    for name, t in ours.items():
        module, param = name.rsplit(".", 1)
        for data_name in t.tensor_data_names:
            tensors[f"{module}._{param}_{data_name}"] = getattr(t, data_name).detach().clone()
        metadata[name] = json.dumps({
            "_type": type(t).__name__, "_tensor_data_names": list(t.tensor_data_names),
            "_data": {"group_size": t.group_size, "shape": list(t.shape)}})
    metadata["tensor_names"] = json.dumps(list(state_dict))
    return tensors, metadata


class _Deserialize(TorchAoDeserialize):
    """Rebuilds one quantised parameter from its flattened tensors: ours here, torchao's
    through torchao's unflattening (given only this parameter's metadata, since
    torchao's metadata check refuses a checkpoint that holds any class of ours)."""

    def convert(self, input_dict, source_patterns=None, model=None, full_layer_name=None,
                missing_keys=None, **kwargs):
        module, _ = get_module_from_name(model, full_layer_name)
        module._hf_quantized_needs_local_tp = True
        layer = full_layer_name.rsplit(".", 1)[0]
        data = {}
        for suffix, values in input_dict.items():
            if len(values) != 1:
                raise ValueError(f"Expected one tensor for {suffix}, got {len(values)}")
            data[f"{layer}.{suffix}"] = values[0]
        raw = self.hf_quantizer.metadata.get(full_layer_name)
        if raw is None:
            raise ValueError(f"{full_layer_name}: no quantisation metadata in the checkpoint")
        meta = json.loads(raw)
        cls = _TENSORS.get(meta.get("_type"))
        if cls is None:
            param, left = unflatten_tensor_state_dict(
                data, {"tensor_names": json.dumps([full_layer_name]), full_layer_name: raw})
            assert not left, f"unused tensors {list(left)}"
            param = param[full_layer_name]
        else:
            prefix = f"{layer}._{full_layer_name.rsplit('.', 1)[1]}_"
            parts = [data[prefix + n] for n in meta["_tensor_data_names"]]
            param = cls(*parts, meta["_data"]["group_size"], torch.Size(meta["_data"]["shape"]))
        if isinstance(module, torch.nn.Linear):
            module.extra_repr = types.MethodType(_linear_extra_repr, module)
        module._is_hf_initialized = True
        for p in module.parameters(recurse=False):
            p._is_hf_initialized = True
        return {full_layer_name: param}


@register_quantizer(QUANT_METHOD)
class TpuTorchAoHfQuantizer(TorchAoHfQuantizer):
    """Transformers' torchao quantizer, saving and loading torch_tpu's tensors too."""

    def get_state_dict_and_metadata(self, model):
        return _flatten(model.state_dict())

    def _discover_quantized_param_names(self):
        names = set()
        for key, value in (getattr(self, "metadata", None) or {}).items():
            if "." not in key:
                continue
            try:
                meta = json.loads(value)
            except (TypeError, ValueError):
                continue
            if isinstance(meta, dict) and meta.get("_type") not in (None, "Tensor"):
                names.add(key.rsplit(".", 1)[1])
        return names or {"weight"}

    def get_load_operations(self):
        return {"deserialize": _Deserialize}

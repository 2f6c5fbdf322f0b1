"""Quantization configs for torchao's `quantize_` that run on tpu.

    from torchao.quantization import quantize_
    from torch_tpu.quantization import TpuInt4WeightOnlyConfig
    quantize_(model.to("tpu"), TpuInt4WeightOnlyConfig(group_size=128))

Each config is registered with torchao through its extension point
(`torchao.quantization.transform_module.register_quantize_module_handler`) when this
package is imported; `import torch_tpu` does not import it (nor torchao). The names
differ from torchao's (`Tpu...`) because torchao's `config_from_dict` (used by
Transformers' TorchAoConfig to reload a saved model) resolves a config by class name in
torchao's own modules only: a same-named class would silently come back as torchao's.
"""
from .float8 import TpuFloat8DynamicActivationFloat8WeightConfig
from .int4 import Int4PackedTensor, TpuInt4WeightOnlyConfig

__all__ = ["TpuFloat8DynamicActivationFloat8WeightConfig", "Int4PackedTensor", "TpuInt4WeightOnlyConfig"]

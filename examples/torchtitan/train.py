"""TorchTitan's own `torchtitan.train` entry point, with FlexAttention allowed on tpu.

TorchTitan's FlexAttention calls `torch.nn.attention.flex_attention`, whose device check
refuses tpu tensors; this launcher makes the one documented opt-in
(`torch_tpu.integrations.flex_attention.enable()`, see docs/flex_attention.md) and then
runs TorchTitan's trainer unchanged, with the command line TorchTitan documents:

    .venv-titan/bin/torchrun --nproc_per_node 2 examples/torchtitan/train.py \
        --model.name llama3 --model.flavor debugmodel_flex_attn ...

docs/torchtitan.md has the full commands (FSDP2, FSDP2 x TP, compile, DCP resume).
"""
import torch_tpu.integrations.flex_attention as tpu_flex

tpu_flex.enable()

from torchtitan.train import Trainer, main  # noqa: E402

if __name__ == "__main__":
    main(Trainer)

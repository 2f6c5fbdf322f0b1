"""TorchTitan 0.3.0's Llama 3 debug model, with TorchTitan's own FlexAttention (compiled
with inductor and TorchTitan's inductor options, as its trainer does), trains on tpu
after torch_tpu.integrations.flex_attention.enable(). Model-level: the model, its
document-mask BlockMask (`get_attention_masks`), cross-entropy and AdamW, 10 steps on
random tokens (batch 2, sequence 128); not TorchTitan's Trainer (which needs its
tokenizer and c4_test assets from the TorchTitan repository).

    python examples/torchtitan/llama3_debug_flex.py tpu 10   # on tpu
    python examples/torchtitan/llama3_debug_flex.py cpu 10   # the CPU reference

TorchTitan pins packages the project's environment does not hold (datasets<4.8,
spmd_types, triton for an import), so it goes into a separate venv that sees the
project's .venv behind its own packages:

    python3.11 -m venv /tmp/titan-venv
    echo $PWD/.venv/lib/python3.11/site-packages > /tmp/titan-venv/lib/python3.11/site-packages/zz_project.pth
    echo $PWD > /tmp/titan-venv/lib/python3.11/site-packages/zz_src.pth
    /tmp/titan-venv/bin/pip install torchtitan==0.3.0 triton==3.8.0
    /tmp/titan-venv/bin/python examples/torchtitan/llama3_debug_flex.py tpu 10

The CPU reference: PyTorch refuses flex_attention's backward on the CPU (its inductor
kernel has none), so for the reference only this script lets CPU tensors through
PyTorch's check and runs flex_attention uncompiled, i.e. the HOP's dense math kernel,
the formula the tpu kernels use.
"""
import sys
import time
import warnings

import torch
import torch.nn.attention.flex_attention as flex

import torch_tpu
import torch_tpu.integrations.flex_attention as tpu_flex


def main(device, steps):
    tpu_flex.enable()
    from torchtitan.models.common import attention
    from torchtitan.models.llama3 import model_registry
    if device == "cpu":  # the reference only (see the module note)
        flex._validate_device = lambda query, key, value: None
        attention.FlexAttention._compiled_flex_attn = staticmethod(flex.flex_attention)

    with torch.device("meta"):
        model = model_registry("debugmodel").model.build()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_states(buffer_device=torch.device("cpu"))  # the same weights on both devices
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4)
    g = torch.Generator().manual_seed(1)
    batch, seq = 2, 128
    positions = torch.arange(seq).expand(batch, seq).to(device)
    start = time.time()
    for step in range(steps):
        tokens = torch.randint(0, 2048, (batch, seq + 1), generator=g)
        x, y = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
        logits = model(x, attention_masks=model.get_attention_masks(positions))
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step} loss {loss.item():.6f} ({time.time() - start:.1f} s)", flush=True)
    if device != "cpu":
        print("CPU-fallback ops:", torch_tpu.debug.metrics()["cpu_fallback_counts"])


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    main(sys.argv[1] if len(sys.argv) > 1 else "tpu", int(sys.argv[2]) if len(sys.argv) > 2 else 10)

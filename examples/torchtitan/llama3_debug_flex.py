"""TorchTitan's Llama 3 debug model with its FlexAttention (`debugmodel_flex_attn`,
compiled with inductor and TorchTitan's inductor options, block-causal document masks)
trains on tpu after torch_tpu.integrations.flex_attention.enable(), and matches a CPU
reference step by step. Model-level (the model, its masks, cross-entropy, AdamW, random
tokens, batch 2, sequence 128); TorchTitan's Trainer under torchrun is
examples/torchtitan/train.py (docs/torchtitan.md).

    bash scripts/install_titan.sh                                     # .venv-titan
    .venv-titan/bin/python examples/torchtitan/llama3_debug_flex.py 10

The reference is the same model and weights on the CPU with TorchTitan's
FlexAttentionWrapper replaced by SDPA with the dense mask its BlockMask's `mask_mod`
defines (cpu_reference.DenseMaskAttention): PyTorch's flex_attention has no backward on
the CPU, and nothing of PyTorch or TorchTitan is changed for the reference.
"""
import copy
import os
import sys
import time
import types
import warnings

import torch
from torch.nn.attention.flex_attention import and_masks, create_block_mask

import torch_tpu
import torch_tpu.integrations.flex_attention as tpu_flex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_reference import use_dense_attention  # noqa: E402

EOS = 0  # token id that ends a document: random tokens give a few documents per row


def cpu_masks(tokens):
    """The BlockMask TorchTitan's `get_attention_masks` builds, made on the CPU."""
    from torchtitan.models.attention import get_causal_mask_mod, get_document_mask_mod

    b, seq = tokens.shape
    mask_mod = and_masks(get_causal_mask_mod(), get_document_mask_mod(tokens, EOS))
    return create_block_mask(mask_mod, b, None, seq, seq, device="cpu")


def main(steps):
    tpu_flex.enable()
    from torchtitan.models.llama3 import Transformer, llama3_args

    with torch.device("meta"):
        model = Transformer(llama3_args["debugmodel_flex_attn"])
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    with torch.no_grad():
        model.init_weights(buffer_device=torch.device("cpu"))
    ref = copy.deepcopy(model)
    use_dense_attention(ref)
    model = model.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=8e-4)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=8e-4)
    tokenizer = types.SimpleNamespace(eos_id=EOS)
    g = torch.Generator().manual_seed(1)
    batch, seq = 2, 128
    start = time.time()
    worst = 0.0
    for step in range(steps):
        tokens = torch.randint(0, 2048, (batch, seq + 1), generator=g)
        x, y = tokens[:, :-1], tokens[:, 1:]
        losses = []
        for m, o, dev, masks in ((model, opt, "tpu", None), (ref, ref_opt, "cpu", cpu_masks(x))):
            xd = x.to(dev)
            if masks is None:
                masks = m.get_attention_masks(input_batch=xd, tokenizer=tokenizer)
            logits = m(xd, attention_masks=masks)
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(),
                                                     y.to(dev).flatten())
            loss.backward()
            o.step()
            o.zero_grad()
            losses.append(loss.item())
        worst = max(worst, abs(losses[0] - losses[1]) / abs(losses[1]))
        print(f"step {step} loss tpu {losses[0]:.6f} cpu {losses[1]:.6f} "
              f"({time.time() - start:.1f} s)", flush=True)
    print(f"largest relative loss difference: {worst:.2e}")
    print("CPU-fallback ops:", torch_tpu.debug.metrics()["cpu_fallback_counts"])


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)

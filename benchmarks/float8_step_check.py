"""One float8 training step of the minGPT example (torchao convert_to_float8_training,
tensor-wise, float32 weights) on tpu against the same step on PyTorch's CPU backend and
against torchao's emulated float8 on the CPU (Float8LinearConfig(emulate=True)): the
losses of three AdamW steps and the first step's gradients, as the largest difference
relative to each gradient's largest element, and the relative L2 norm of the
difference. The CPU-vs-emulated row is the noise floor: float8 casts flip by one ulp
when a float32 sum feeding them changes in its last bit.

    python benchmarks/float8_step_check.py
"""
import copy
import dataclasses
import os
import sys

import torch

import torch_tpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from examples.mingpt.data import CharData  # noqa: E402
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402


def run(base, data, device, emulate=False, steps=3):
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    m = copy.deepcopy(base).to(device)
    cfg = dataclasses.replace(Float8LinearConfig.from_recipe_name("tensorwise"), emulate=emulate)
    convert_to_float8_training(m, config=cfg, module_filter_fn=lambda mod, n: n != "head")
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    losses, grads = [], None
    for step in range(steps):
        x, y = (t.to(device) for t in data.batch(16, 64, g))
        _, loss = m(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if step == 0:
            grads = {n: p.grad.detach().float().cpu() for n, p in m.named_parameters()}
        opt.step()
        losses.append(loss.item())
    return losses, grads


def compare(name, got, want):
    rel_max = {n: ((got[1][n] - want[1][n]).abs().max() / want[1][n].abs().max()).item() for n in want[1]}
    rel_l2 = {n: ((got[1][n] - want[1][n]).norm() / want[1][n].norm()).item() for n in want[1]}
    worst = max(rel_max, key=rel_max.get)
    print(f"{name}: losses {['%.6f' % v for v in got[0]]} vs {['%.6f' % v for v in want[0]]}; "
          f"step-1 gradients: max |diff| / max |ref| {rel_max[worst]:.3g} ({worst}), "
          f"worst relative L2 {max(rel_l2.values()):.3g} ({max(rel_l2, key=rel_l2.get)})")


def main():
    torch_tpu.set_execution_mode("defer_and_fuse")
    data = CharData()
    torch.manual_seed(0)
    base = GPT(GPTConfig(vocab_size=data.vocab_size, block_size=64, n_layer=2, n_head=4, n_embd=128))
    tpu, cpu, emulated = run(base, data, "tpu"), run(base, data, "cpu"), run(base, data, "cpu", True)
    compare("tpu vs cpu", tpu, cpu)
    compare("tpu vs cpu emulated", tpu, emulated)
    compare("cpu vs cpu emulated (noise floor)", cpu, emulated)


if __name__ == "__main__":
    main()

"""Pure bfloat16: a model cast with .to(torch.bfloat16) trains on tpu with
AdamW's for-loop, foreach and fused paths and SGD, step for step with the same
bfloat16 training on PyTorch's CPU backend."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402

VOCAB = 17


def _batches(steps):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        start = torch.randint(0, VOCAB, (8, 1), generator=g)
        seq = (start + torch.arange(9)) % VOCAB
        out.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return out


OPTIMIZERS = {
    "adamw-forloop": lambda p: torch.optim.AdamW(p, lr=3e-3, foreach=False),
    "adamw-foreach": lambda p: torch.optim.AdamW(p, lr=3e-3, foreach=True),
    "adamw-fused": lambda p: torch.optim.AdamW(p, lr=3e-3, fused=True),
    "sgd-foreach": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
}


def train(device, make_opt, steps=8):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, block_size=8, n_layer=1, n_head=2, n_embd=32))
    model = model.to(device=device, dtype=torch.bfloat16)
    opt = make_opt(model.parameters())
    losses = []
    for x, y in _batches(steps):
        opt.zero_grad(set_to_none=True)
        _, loss = model(x.to(device), y.to(device))
        assert loss.dtype == torch.bfloat16
        loss.backward()
        opt.step()
        losses.append(loss.float().item())
    params = [p.detach().float().cpu() for p in model.parameters()]
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    return losses, params


# ~30 s each on two loaded cores: the fused path (the one a TPU user wants) runs by default.
@pytest.mark.parametrize("opt", [o if o == "adamw-fused" else pytest.param(o, marks=pytest.mark.slow)
                                 for o in OPTIMIZERS])
def test_bf16_model_trains_like_cpu(opt):
    losses, params = train("tpu", OPTIMIZERS[opt])
    ref_losses, ref_params = train("cpu", OPTIMIZERS[opt])
    # bfloat16 keeps 8 bits: a flipped rounding early on shows in later steps.
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=3e-2, atol=3e-2)
    assert losses[-1] < 0.9 * losses[0], losses
    for p, q in zip(params, ref_params):
        torch.testing.assert_close(p, q, rtol=5e-2, atol=5e-2)

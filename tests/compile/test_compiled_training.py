"""A compiled training step (forward, backward, AdamW step) for 20 steps follows the
eager losses, and after the first step nothing recompiles: no new Dynamo graph and
no new program."""
import copy

import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import torch_tpu
from models import mlp, small_gpt


def _train_step(model, opt, x, y, loss_fn):
    def step():
        loss = loss_fn(model, x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()  # compiled as its own graph: parameter and state updates in place
        return loss
    return step


def _run(model_fn, loss_fn, make_inputs, steps=20, ref_device="cpu"):
    torch.manual_seed(0)
    model = model_fn()
    x, y = make_inputs()
    if ref_device == "tpu":
        model = model.to("tpu")  # see test_small_gpt_forward_and_gradients
    ref = copy.deepcopy(model).to(ref_device)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    ref_step = _train_step(ref, ref_opt, x.to(ref_device), y.to(ref_device), loss_fn)
    tpu_model = model.to("tpu")
    opt = torch.optim.AdamW(tpu_model.parameters(), lr=1e-2)
    step = torch.compile(_train_step(tpu_model, opt, x.to("tpu"), y.to("tpu"), loss_fn),
                         backend="tpu")
    ref_losses, losses = [], []
    for i in range(steps):
        ref_losses.append(ref_step().item())
        losses.append(step().item())
        if i == 0:
            frames = counters["stats"]["unique_graphs"]
            programs = torch_tpu.debug.metrics()["programs_compiled"]
            fused_misses = torch_tpu._C._deferred_stats()["fused_cache_misses"]
    torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-5)
    assert losses[-1] < losses[0]
    assert counters["stats"]["unique_graphs"] == frames, "Dynamo recompiled after step 1"
    assert torch_tpu.debug.metrics()["programs_compiled"] == programs, "a new program compiled"
    assert torch_tpu._C._deferred_stats()["fused_cache_misses"] == fused_misses
    kinds = sorted(g["kind"] for g in torch_tpu.debug.compiled_graphs())
    # Forward and backward of the model, and the optimizer step (no autograd).
    assert kinds == ["backward", "forward", "inference"], kinds
    for g in torch_tpu.debug.compiled_graphs():
        assert g["calls"] == steps and g["compiles"] <= 1
        assert g["cache_hits"] >= steps - 1


def test_mlp_adamw_20_steps():
    _run(mlp, lambda m, x, y: F.mse_loss(m(x), y),
         lambda: (torch.randn(16, 8), torch.randn(16, 4)))


def test_small_gpt_adamw_20_steps():
    _run(small_gpt, lambda m, x, y: m(x, y)[1],
         lambda: (torch.randint(0, 17, (2, 8)), torch.randint(0, 17, (2, 8))),
         ref_device="tpu")

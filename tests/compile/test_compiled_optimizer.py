"""torch.compile of a whole training step (forward, backward, AdamW's step): the
parameters after 5 compiled steps equal eager CPU's, and every graph of the step
is one program called directly: with capturable=True (the optimizer's step counts
and a tensor learning rate on the device), where changing the learning rate
between steps recompiles nothing, and without it, where the CPU step counts and
bias corrections run in the graph's CPU prologue (dynamo/cpu_prologue.py)."""
import copy

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.utils import counters

import torch_tpu

LRS = (1e-2, 5e-3, 2e-3, 1e-3, 5e-4)


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


@pytest.mark.parametrize("capturable", [False, True], ids=["cpu_step_counts", "capturable"])
def test_compiled_adamw_step_equals_cpu(capturable):
    ref = _model()
    model = copy.deepcopy(ref).to("tpu")
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=LRS[0], weight_decay=0.1)
    lr = torch.tensor(LRS[0], device="tpu") if capturable else LRS[0]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1, capturable=capturable)

    def step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    compiled = torch.compile(step, backend="tpu")
    xt, yt = x.to("tpu"), y.to("tpu")
    for i in range(5):
        if capturable:  # a new learning rate each step, in the tensor the graph reads
            ref_opt.param_groups[0]["lr"] = LRS[i]
            opt.param_groups[0]["lr"].fill_(LRS[i])
        ref_loss = F.mse_loss(ref(x), y)
        ref_opt.zero_grad(set_to_none=True)
        ref_loss.backward()
        ref_opt.step()
        loss = compiled(xt, yt)
        torch.testing.assert_close(loss.item(), ref_loss.item(), rtol=1e-5, atol=1e-6)
        if i == 0:
            frames = counters["stats"]["unique_graphs"]
            programs = torch_tpu.debug.metrics()["programs_compiled"]
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    assert counters["stats"]["unique_graphs"] == frames, "Dynamo recompiled"
    assert torch_tpu.debug.metrics()["programs_compiled"] == programs, "a program recompiled"
    graphs = torch_tpu.debug.compiled_graphs()
    assert sorted(g["kind"] for g in graphs) == ["backward", "forward", "inference"]
    for g in graphs:
        assert g["calls"] == 5
        assert g["why_recorded"] is None and g["direct_calls"] == 4, g
    if not capturable:  # the CPU step counts advanced in the CPU prologue, once per step
        assert all(s["step"].device.type == "cpu" and s["step"].item() == 5
                   for s in opt.state.values())

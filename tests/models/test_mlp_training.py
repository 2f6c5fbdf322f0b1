"""An MLP trained 20 steps on tpu matches the same training on CPU (rel. 1e-4, float32)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

STEPS = 20


def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=g)
    y = torch.randint(0, 4, (64,), generator=g)
    return x, y


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(),
                         nn.Linear(32, 4))


def train(model, opt_fn, device, x, y):
    model = model.to(device)
    opt = opt_fn(model.parameters())
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@pytest.mark.parametrize("opt_fn", [
    lambda p: torch.optim.SGD(p, lr=0.1),
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
    lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.01),
], ids=["sgd", "sgd_momentum", "adamw"])
def test_mlp_matches_cpu(opt_fn):
    x, y = make_data()
    model = make_model()
    cpu_losses, cpu_model = train(copy.deepcopy(model), opt_fn, "cpu", x, y)
    tpu_losses, tpu_model = train(copy.deepcopy(model), opt_fn, "tpu", x, y)
    assert cpu_losses[-1] < cpu_losses[0]  # it does learn
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses),
                               rtol=1e-4, atol=0)
    for pc, pt in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert pt.device.type == "tpu"
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), rtol=1e-3, atol=1e-5)


def test_mse_regression_adamw_matches_cpu():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.Sigmoid(), nn.Linear(16, 1))
    x = torch.randn(32, 8)
    y = x.sum(1, keepdim=True)
    losses = {}
    for device in ("cpu", "tpu"):
        m = copy.deepcopy(model).to(device)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        xs, ys = x.to(device), y.to(device)
        out = []
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.mse_loss(m(xs), ys)
            loss.backward()
            opt.step()
            out.append(loss.item())
        losses[device] = out
    torch.testing.assert_close(torch.tensor(losses["tpu"]), torch.tensor(losses["cpu"]),
                               rtol=1e-4, atol=0)

"""torchao's float8 training (torchao.float8.convert_to_float8_training) on tpu: the
Float8Linear layers quantise activations, weights and gradients with float8 casts and
multiply through torch._scaled_mm, all natively on tpu (no CPU fallback). A few SGD
steps match the same float8 training on PyTorch's CPU backend, tensor-wise (float32
model: identical losses) and row-wise (bfloat16 model: bfloat16 rounding apart)."""
import pytest
import torch

import torch_tpu

torchao_float8 = pytest.importorskip("torchao.float8")


def losses(device, recipe, steps=4):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    dtype = torch.bfloat16 if recipe == "rowwise" else torch.float32
    m = m.to(device=device, dtype=dtype)
    torchao_float8.convert_to_float8_training(
        m, config=torchao_float8.Float8LinearConfig.from_recipe_name(recipe))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        x = torch.randn(32, 64, generator=g).to(device, dtype)
        y = torch.randn(32, 32, generator=g).to(device, dtype)
        loss = (m(x) - y).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return torch.tensor(out)


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_float8_training_matches_cpu(recipe):
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    got = losses("tpu", recipe)
    after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert {k: v for k, v in after.items() if v != before.get(k, 0)} == {}
    want = losses("cpu", recipe)
    tol = 1e-6 if recipe == "tensorwise" else 2e-3
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    assert got[-1] < got[0]

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


def gpt_losses(float8, steps):
    """The minGPT example on its character corpus, bfloat16 weights, AdamW; `float8`
    converts every linear but the tied head (vocabulary not a multiple of 16)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from examples.mingpt.data import CharData
    from examples.mingpt.model import GPT, GPTConfig
    data = CharData()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=data.vocab_size, block_size=32, n_layer=1, n_head=4, n_embd=64))
    model = model.to(torch.bfloat16).to("tpu")
    if float8:
        torchao_float8.convert_to_float8_training(
            model, config=torchao_float8.Float8LinearConfig.from_recipe_name("tensorwise"),
            module_filter_fn=lambda m, name: name != "head")
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        x, y = (t.to("tpu") for t in data.batch(16, 32, g))
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        out.append(loss.item())
    return torch.tensor(out)


@pytest.mark.slow
@pytest.mark.strict_only
def test_float8_training_converges_like_bf16():
    """A shorter run of benchmarks/quantization.py's training rows: float8 training of
    the example GPT learns (the loss falls well below its start) and ends within 3% of
    bfloat16 training (the benchmark's 200 steps: 2%)."""
    bf16, f8 = gpt_losses(False, 60), gpt_losses(True, 60)
    assert torch.isfinite(f8).all()
    assert f8[-10:].mean() < 0.8 * f8[0]
    assert abs(f8[-10:].mean() / bf16[-10:].mean() - 1) < 0.03, (f8[-10:], bf16[-10:])


def gpt_float8_layers(dtype):
    """The example GPT (float32, one block) converted to float8 training, one forward
    and backward on the CPU with a hook per Float8Linear recording what it was given:
    (name, CPU layer, input, gradient of its output)."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
    from examples.mingpt.data import CharData
    from examples.mingpt.model import GPT, GPTConfig
    data = CharData()
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=data.vocab_size, block_size=32, n_layer=1, n_head=4, n_embd=64))
    torchao_float8.convert_to_float8_training(
        model, config=torchao_float8.Float8LinearConfig.from_recipe_name("tensorwise"),
        module_filter_fn=lambda m, name: name != "head")
    model = model.to(dtype)
    seen = {}
    layers = {n: m for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"}
    for name, m in layers.items():
        m.register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, [i[0].detach()]))
        m.register_full_backward_hook(lambda m, gi, go, name=name: seen[name].append(go[0].detach()))
    x, y = data.batch(8, 32, torch.Generator().manual_seed(0))
    model(x, y)[1].backward()
    return [(n, layers[n], *seen[n]) for n in layers]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_float8_gpt_layers_match_cpu(dtype):
    """Every float8 linear of the example GPT, given the activations and output
    gradients of a real training step: tpu computes torchao's float8 forward and both
    backward products as PyTorch's CPU backend does. Same inputs, so the same amax,
    scales and float8 casts (bit-exact), and the float8 products summed in float32: the
    output, input gradient and weight gradient agree to float32 (bf16: its rounding)
    tolerance. A scaling or cast bug shows here, not only as training noise."""
    import copy
    layers = gpt_float8_layers(dtype)
    assert len(layers) == 4  # qkv, proj, two MLP linears
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-5)
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    for name, layer, x, gy in layers:
        results = {}
        for device in ("cpu", "tpu"):
            m = copy.deepcopy(layer).to(device)
            xi = x.detach().to(device).requires_grad_(True)
            out = m(xi)
            out.backward(gy.to(device))
            results[device] = [t.cpu() for t in (out, xi.grad, m.weight.grad, m.bias.grad)]
        for what, got, want in zip(("output", "grad input", "grad weight", "grad bias"),
                                   results["tpu"], results["cpu"]):
            torch.testing.assert_close(got, want, **tol, msg=lambda m: f"{name} {what}: {m}")
    after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert {k: v for k, v in after.items() if v != before.get(k, 0)} == {}

"""One compile per op signature; runtime scalars never recompile; CPU fallback warns once."""
import warnings

import pytest

import torch
import torch_tpu

from conftest import assert_close_cpu


def compiled():
    # Programs built: compiled by XLA, or loaded from the persistent compile cache
    # (another test of the session may have compiled the same program already).
    m = torch_tpu.debug.metrics()
    return m["programs_compiled"] + m["disk_hits"]


@pytest.mark.strict_only
def test_one_compile_per_signature():
    x = torch.randn(7, 13).to("tpu")
    y = torch.randn(7, 13).to("tpu")
    torch_tpu.debug.clear_program_cache()
    n0 = compiled()
    z = x * y
    assert compiled() == n0 + 1
    for _ in range(5):
        z = x * y
    assert compiled() == n0 + 1
    x2 = torch.randn(7, 13).to("tpu")         # same signature, other data
    assert_close_cpu(x2 * y, x2.cpu() * y.cpu())
    assert compiled() == n0 + 1
    x * y[:1]                                  # another shape: another program
    assert compiled() == n0 + 2
    x.double() * y.double()                    # another dtype (plus the conversions)
    n1 = compiled()
    x.double() * y.double()
    assert compiled() == n1
    assert_close_cpu(z, x.cpu() * y.cpu())
    assert torch_tpu.debug.program_cache_size() >= 2


def test_alpha_and_scalars_do_not_recompile():
    x = torch.randn(5, 3).to("tpu")
    y = torch.randn(5, 3).to("tpu")

    def body(k):
        r = torch.add(x, y, alpha=k * 0.37)
        assert_close_cpu(r, torch.add(x.cpu(), y.cpu(), alpha=k * 0.37))
        assert_close_cpu(x * (k + 0.25), x.cpu() * (k + 0.25))
        assert_close_cpu(x.add(k / 3), x.cpu().add(k / 3))
    body(0.5)  # warm-up: compiles (one program per op, or per fused graph)
    n0 = compiled()
    for k in range(1, 8):
        body(k)
    assert compiled() == n0


def test_optimizer_lr_changes_do_not_recompile():
    model = torch.nn.Linear(6, 3).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.randn(8, 6).to("tpu")

    def step(lr):
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad()
        model(data).pow(2).mean().backward()
        opt.step()

    step(0.1)
    step(0.1)
    n0 = compiled()
    for k in range(6):
        step(0.1 / (k + 2))
    assert compiled() == n0

    adam = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        adam.zero_grad()
        model(data).sum().backward()
        adam.step()
    n1 = compiled()
    for k in range(4):
        adam.param_groups[0]["lr"] = 1e-3 * (k + 2)
        adam.zero_grad()
        model(data).sum().backward()
        adam.step()
    assert compiled() == n1


def _unlowered_op():
    lowered = set(torch_tpu.debug.lowered_ops())
    candidates = [("aten::angle", torch.angle), ("aten::histc", lambda x: torch.histc(x, bins=4)),
                  ("aten::_logcumsumexp", lambda x: torch.logcumsumexp(x, 0)),
                  ("aten::i0", torch.i0), ("aten::erfinv", lambda x: torch.erfinv(x * 0.1)),
                  ("aten::digamma", lambda x: torch.digamma(x.abs() + 1)),
                  ("aten::lgamma", lambda x: torch.lgamma(x.abs() + 1))]
    for name, fn in candidates:
        if name not in lowered and name + ".out" not in lowered:
            return name, fn
    raise AssertionError("every candidate op has a lowering: pick another one for this test")


def test_cpu_fallback_warns_once_and_counts():
    name, fn = _unlowered_op()
    x_c = torch.randn(6)
    x_t = x_c.to("tpu")
    before = torch_tpu.debug.metrics()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r1 = fn(x_t)
        r2 = fn(x_t)
    mine = [str(m.message) for m in w if name in str(m.message)]
    after = torch_tpu.debug.metrics()
    counts = after["cpu_fallback_counts"]
    assert any(k.startswith(name) for k in counts), counts
    n = sum(v for k, v in counts.items() if k.startswith(name))
    n_before = sum(v for k, v in before["cpu_fallback_counts"].items() if k.startswith(name))
    assert n - n_before == 2
    assert after["cpu_fallback_ops"] - before["cpu_fallback_ops"] == 2
    assert len(mine) <= 1
    if n_before == 0:
        assert len(mine) == 1 and "runs on the CPU" in mine[0]
    assert r1.device.type == "tpu"
    assert_close_cpu(r1, fn(x_c))
    assert_close_cpu(r2, fn(x_c))
    assert name in torch_tpu.debug.report()


def test_metrics_and_report():
    torch_tpu.debug.reset_metrics()
    x = torch.ones(4, device="tpu")
    (x + 1).cpu()
    m = torch_tpu.debug.metrics()
    assert m["ops_executed"] >= 1 and m["executions"] >= 1
    assert m["bytes_to_host"] >= 16
    assert "programs compiled" in torch_tpu.debug.report()
    assert "aten::add.Tensor" in torch_tpu.debug.lowered_ops()


@pytest.mark.strict_only
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_int_and_float_fill_values_share_a_program(dtype):
    # masked_fill / fill_ / index_fill take their value as self's dtype, so an int
    # value enters as the double it equals: autograd's masked_fill(mask, 0) shares
    # the forward's masked_fill(mask, -inf) program (one compile fewer in a GPT step).
    x = torch.randn(6, 40).to(dtype)
    mask = torch.rand(6, 40) > 0.5
    idx = torch.tensor([0, 3, 39])
    xt, mt, it = x.to("tpu"), mask.to("tpu"), idx.to("tpu")
    huge = 2 ** 53 if dtype != torch.float16 else 2 ** 11  # float16 overflows beyond 65504
    values = [float("-inf"), 0, -3, huge, 2.5, -huge]
    for v in values[:1]:  # warm-up: one program per op
        xt.masked_fill(mt, v).cpu(), xt.clone().fill_(v).cpu(), xt.index_fill(1, it, v).cpu()
    n0 = compiled()
    for v in values:
        assert_close_cpu(xt.masked_fill(mt, v), x.masked_fill(mask, v), rtol=0, atol=0)
        assert_close_cpu(xt.clone().fill_(v), x.clone().fill_(v), rtol=0, atol=0)
        assert_close_cpu(xt.index_fill(1, it, v), x.index_fill(1, idx, v), rtol=0, atol=0)
    assert compiled() == n0  # the ints ran the programs the float compiled
    # Beyond 2^53 an int is not exact as a double: it keeps its own program and
    # rounds from the integer itself, as on the CPU.
    if dtype != torch.float16:
        big = 2 ** 53 + 1
        assert_close_cpu(xt.masked_fill(mt, big), x.masked_fill(mask, big), rtol=0, atol=0)


@pytest.mark.strict_only
def test_int_fill_values_of_integer_tensors_stay_integers():
    x = torch.randint(-5, 5, (4, 50), dtype=torch.int64)
    mask = torch.rand(4, 50) > 0.5
    xt, mt = x.to("tpu"), mask.to("tpu")
    for v in (2 ** 62 + 1, -7, 0):  # exact in int64, not in a double
        assert torch.equal(xt.masked_fill(mt, v).cpu(), x.masked_fill(mask, v))
        assert torch.equal(xt.clone().fill_(v).cpu(), x.clone().fill_(v))

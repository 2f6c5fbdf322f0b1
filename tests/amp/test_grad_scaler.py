"""torch.amp.GradScaler("tpu"): its two kernels run natively and match PyTorch's
CPU kernels; a step with an inf is skipped; a step reads the host no more
often than CUDA's scaler does."""
import copy

import pytest
import torch

from conftest import assert_close_cpu


def _no_fallback(metrics_delta):
    assert metrics_delta("cpu_fallback_ops") == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["f32", "bf16", "fp16"])
@pytest.mark.parametrize("bad", [None, float("inf"), float("-inf"), float("nan")],
                         ids=["finite", "inf", "-inf", "nan"])
def test_non_finite_check_and_unscale(dtype, bad, metrics_delta):
    torch.manual_seed(0)
    grads = [torch.randn(5, 3).to(dtype) * 1024, torch.randn(7).to(dtype), torch.randn(()).to(dtype)]
    if bad is not None:
        grads[1][4] = bad
    for inv in (1 / 1024.0, 1.0):
        cpu = [g.clone() for g in grads]
        tpu = [g.to("tpu") for g in grads]
        found_c, found_t = torch.zeros(1), torch.zeros(1, device="tpu")
        inv_c = torch.full((1,), inv)
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_c, inv_c)
        torch._amp_foreach_non_finite_check_and_unscale_(tpu, found_t, inv_c.to("tpu"))
        assert_close_cpu(found_t, found_c, rtol=0, atol=0)
        for t, c in zip(tpu, cpu):
            assert_close_cpu(t, c, rtol=0, atol=0, equal_nan=True)
    # found_inf keeps a 1 set earlier (it accumulates over the parameter groups).
    found = torch.ones(1, device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(3, device="tpu", dtype=dtype)], found, torch.ones(1, device="tpu"))
    assert found.item() == 1.0
    _no_fallback(metrics_delta)


def test_update_scale_follows_the_cpu_kernel(metrics_delta):
    # A run of steps, some overflowing, with a growth interval of 3.
    pattern = [0, 0, 0, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0]
    s_c, g_c = torch.full((), 65536.0), torch.zeros((), dtype=torch.int32)
    s_t, g_t = s_c.to("tpu"), g_c.to("tpu")
    for inf in pattern:
        f = torch.full((), float(inf))
        torch._amp_update_scale_(s_c, g_c, f, 2.0, 0.5, 3)
        torch._amp_update_scale_(s_t, g_t, f.to("tpu"), 2.0, 0.5, 3)
        assert_close_cpu(s_t, s_c, rtol=0, atol=0)
        assert_close_cpu(g_t, g_c, rtol=0, atol=0)
    # Factors that float32 cannot hold exactly round as in the CPU kernel.
    torch._amp_update_scale_(s_c, g_c, torch.ones(()), 2.0, 0.3, 3)
    torch._amp_update_scale_(s_t, g_t, torch.ones((), device="tpu"), 2.0, 0.3, 3)
    assert_close_cpu(s_t, s_c, rtol=0, atol=0)
    # The scale never grows past float32's range.
    big_c, big_t = torch.full((), 3e38), torch.full((), 3e38, device="tpu")
    one_c, one_t = torch.zeros((), dtype=torch.int32), torch.zeros((), dtype=torch.int32, device="tpu")
    torch._amp_update_scale_(big_c, one_c, torch.zeros(()), 2.0, 0.5, 1)
    torch._amp_update_scale_(big_t, one_t, torch.zeros((), device="tpu"), 2.0, 0.5, 1)
    assert_close_cpu(big_t, big_c, rtol=0, atol=0)
    assert_close_cpu(one_t, one_c, rtol=0, atol=0)
    _no_fallback(metrics_delta)


def test_bad_arguments_raise():
    g = [torch.ones(3, device="tpu")]
    with pytest.raises(RuntimeError, match="found_inf must be a 1-element tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            g, torch.zeros(2, device="tpu"), torch.ones(1, device="tpu"))
    with pytest.raises(RuntimeError, match="inv_scale must be a float tensor"):
        torch._amp_foreach_non_finite_check_and_unscale_(
            g, torch.zeros(1, device="tpu"), torch.ones(1, device="tpu", dtype=torch.float64))
    with pytest.raises(RuntimeError, match="growth_tracker must be an int tensor"):
        torch._amp_update_scale_(torch.ones((), device="tpu"), torch.zeros((), device="tpu"),
                                 torch.zeros((), device="tpu"), 2.0, 0.5, 3)


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _train(device, fused, steps=4, inject_at=1):
    """fp16 autocast + GradScaler; the step `inject_at` gets an inf gradient."""
    torch.manual_seed(0)
    net = _net().to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2, fused=fused, foreach=None if fused else True)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 10, growth_interval=2)
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    history = []
    for step in range(steps):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = torch.nn.functional.mse_loss(net(x.to(device)), y.to(device))
        scaler.scale(loss).backward()
        if step == inject_at:
            net[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().cpu().clone() for p in net.parameters()]
        scaler.step(opt)
        scaler.update()
        after = [p.detach().cpu().clone() for p in net.parameters()]
        history.append((loss.detach().cpu(), scaler.get_scale(), before, after))
    return history


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_scaler_skips_the_step_with_an_inf(fused):
    tpu, cpu = _train("tpu", fused), _train("cpu", fused)
    for step, ((lt, st, bt, at), (lc, sc, bc, ac)) in enumerate(zip(tpu, cpu)):
        assert st == sc, (step, st, sc)
        torch.testing.assert_close(lt, lc, rtol=2e-3, atol=2e-3)
        changed = any(not torch.equal(b, a) for b, a in zip(bt, at))
        assert changed == (step != 1), step  # the injected step changes nothing
        for a_t, a_c in zip(at, ac):
            torch.testing.assert_close(a_t, a_c, rtol=2e-3, atol=2e-3)
    assert tpu[1][1] == tpu[0][1] / 2  # backed off after the inf


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_host_reads_per_step(fused):
    # CUDA's scaler reads found_inf on the host once per step (GradScaler.step),
    # and not at all with an optimizer that takes found_inf itself (fused=True).
    net = _net().to("tpu")
    opt = torch.optim.AdamW(net.parameters(), fused=fused, foreach=None if fused else True)
    scaler = torch.amp.GradScaler("tpu")
    x = torch.randn(6, 8, device="tpu")

    def step():
        opt.zero_grad()
        with torch.autocast("tpu", dtype=torch.float16):
            loss = net(x).float().square().mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    step()  # creates the scale, optimizer state
    before = copy.deepcopy(torch_tpu_metrics())
    step()
    after = torch_tpu_metrics()
    assert after["bytes_to_host"] - before["bytes_to_host"] == (0 if fused else 4)


def torch_tpu_metrics():
    import torch_tpu
    torch_tpu.synchronize()
    return torch_tpu.debug.metrics()

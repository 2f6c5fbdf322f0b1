"""random_, randperm, multinomial (csrc/lower/random.cc): valid values, the
right distribution shape, and same seed -> same numbers."""
import torch

import torch_tpu


def _no_fallback():
    m = torch_tpu.debug.metrics()
    assert m["cpu_fallback_ops"] == 0, m["cpu_fallback_counts"]


def test_random_ranges():
    torch_tpu.debug.reset_metrics()
    x = torch.empty(2000, device="tpu").random_(3, 9).cpu()
    assert x.min() >= 3 and x.max() <= 8 and len(x.unique()) == 6
    y = torch.empty(2000, dtype=torch.int64, device="tpu").random_(5).cpu()
    assert y.min() >= 0 and y.max() <= 4 and len(y.unique()) == 5
    z = torch.empty(2000, dtype=torch.uint8, device="tpu").random_().cpu()
    assert len(z.unique()) > 200
    b = torch.empty(1000, dtype=torch.bool, device="tpu").random_().cpu()
    assert 300 < b.sum() < 700
    r = torch.randint(-4, 4, (3000,), device="tpu").cpu()
    assert r.dtype == torch.int64 and r.min() == -4 and r.max() == 3
    _no_fallback()


def test_normal_is_gaussian():
    torch_tpu.debug.reset_metrics()
    x = torch.randn(20000, device="tpu").cpu()
    assert abs(x.mean()) < 0.05 and abs(x.std() - 1) < 0.05
    # A Gaussian has ~68.3% of its mass within one standard deviation.
    assert 0.66 < (x.abs() < 1).float().mean() < 0.70
    _no_fallback()


def test_randperm():
    torch_tpu.debug.reset_metrics()
    p = torch.randperm(50, device="tpu")
    assert p.dtype == torch.int64
    assert sorted(p.cpu().tolist()) == list(range(50))
    _no_fallback()


def test_multinomial():
    torch_tpu.debug.reset_metrics()
    probs = torch.tensor([[0.1, 0.0, 0.6, 0.3], [0.0, 0.0, 1.0, 0.0]], device="tpu")
    s = torch.multinomial(probs, 4000, replacement=True).cpu()
    assert s.shape == (2, 4000) and (s[0] != 1).all() and (s[1] == 2).all()
    freq = torch.bincount(s[0], minlength=4).float() / 4000
    torch.testing.assert_close(freq, torch.tensor([0.1, 0.0, 0.6, 0.3]), atol=0.03, rtol=0)
    w = torch.multinomial(probs[0], 3).cpu()
    assert len(set(w.tolist())) == 3 and 1 not in w.tolist()
    _no_fallback()


def test_same_seed_same_numbers():
    def draw():
        torch.tpu.manual_seed(123)
        return [torch.randperm(20, device="tpu").cpu(),
                torch.empty(10, device="tpu").random_(0, 100).cpu(),
                torch.multinomial(torch.ones(8, device="tpu"), 5).cpu()]
    for a, b in zip(draw(), draw()):
        assert torch.equal(a, b)

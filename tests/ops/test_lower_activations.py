"""Activation lowerings (csrc/lower/activations.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)
X = torch.randn(5, 7) * 3
X[0, :3] = torch.tensor([0.0, -3.0, 3.0])  # kinks of hardtanh / hardswish / hardsigmoid


@pytest.mark.parametrize("fn", [
    lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"), F.silu, F.mish,
    lambda x: F.leaky_relu(x, 0.2), lambda x: F.hardtanh(x, -2.0, 1.5), F.relu6,
    lambda x: F.elu(x, alpha=0.7), F.selu, F.celu, lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    F.hardswish, F.hardsigmoid, torch.erf, F.logsigmoid, lambda x: F.glu(x[:, :6]), lambda x: F.glu(x[:4], 0),
    lambda x: F.prelu(x, torch.tensor([0.25]).to(x.device)), lambda x: x.clamp_min(0.3),
    lambda x: x.clamp_max(-0.2), lambda x: torch.clamp_min(x, x.flip(0)),
    lambda x: torch.logit(torch.sigmoid(x)), lambda x: torch.logit(torch.sigmoid(x), eps=0.05),
], ids=["gelu", "gelu_tanh", "silu", "mish", "leaky_relu", "hardtanh", "relu6", "elu", "selu",
        "celu", "softplus", "hardswish", "hardsigmoid", "erf", "logsigmoid", "glu0", "glu1", "prelu",
        "clamp_min", "clamp_max", "clamp_min_tensor", "logit", "logit_eps"])
def test_activation_fwd_bwd(fn):
    check(fn, X, atol=1e-5)


def test_non_contiguous_and_bf16():
    check(F.gelu, X.t(), atol=1e-5)
    check(lambda x: F.gelu(x, approximate="tanh"), X.bfloat16(), grad=False, atol=2e-2)
    check(F.silu, X.bfloat16(), grad=False, atol=2e-2)


def test_sgn_forward():
    # sgn's backward on real inputs asks for _efficientzerotensor (a factory
    # outside this family), so only the forward is checked here.
    check(torch.sgn, X, grad=False)


def test_prelu_per_channel():
    x = torch.randn(2, 3, 4, 4)
    w = torch.tensor([0.1, 0.2, 0.3])
    check(F.prelu, x, w, atol=1e-5)


def test_erf_extremes():
    x = torch.tensor([0.0, 1e-8, -1e-3, 0.5, -2.0, 4.0, -6.0, 30.0, float("inf"), float("-inf")])
    check(torch.erf, x, grad=False, atol=1e-6)


def test_inplace_variants():
    def f(x):
        y = x * 1.0
        F.leaky_relu_(y, 0.1)
        F.hardtanh_(y, -1.0, 1.0)
        return F.elu_(y * 2.0)
    check(f, X, grad=False, atol=1e-5)


def test_runtime_slope_reuses_program():
    import torch_tpu
    x = X.to("tpu")
    F.leaky_relu(x, 0.1).cpu()  # warm-up, materialised as the loop's reads are
    torch_tpu.debug.reset_metrics()
    for s in (0.2, 0.3):
        torch.testing.assert_close(F.leaky_relu(x, s).cpu(), F.leaky_relu(X, s))
    assert torch_tpu.debug.metrics()["programs_compiled"] == 0

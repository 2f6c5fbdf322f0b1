"""Normalisation lowerings (csrc/lower/norm.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check
from conftest import assert_close_cpu

torch.manual_seed(0)


@pytest.mark.parametrize("shape,norm,affine", [((4, 6), (6,), True), ((2, 3, 4, 5), (4, 5), True),
                                               ((3, 1), (1,), False), ((2, 3, 8), (8,), False)])
def test_layer_norm(shape, norm, affine):
    x = torch.randn(shape) * 3 + 1
    w = torch.randn(norm) if affine else None
    b = torch.randn(norm) if affine else None
    check(lambda x, w, b: F.layer_norm(x, norm, w, b, eps=1e-5), x, w, b, atol=1e-5)


def test_layer_norm_non_contiguous_and_bf16():
    x = torch.randn(6, 4).t()
    check(lambda x: F.layer_norm(x, (6,)), x, atol=1e-5)
    xb = torch.randn(3, 16).bfloat16()
    check(lambda x: F.layer_norm(x, (16,)), xb, grad=False, atol=2e-2)


def test_layer_norm_eps_is_runtime():
    x = torch.randn(4, 8)
    for eps in (1e-5, 1e-1):
        check(lambda x: F.layer_norm(x, (8,), eps=eps), x, grad=False)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 4), (2, 2, 2, 3, 3)])
def test_batch_norm_train_updates_running_stats(shape):
    c = shape[1]
    x = torch.randn(shape) * 2 + 0.5
    w, b = torch.randn(c), torch.randn(c)
    rm_c, rv_c = torch.randn(c), torch.rand(c) + 0.5
    rm_t, rv_t = rm_c.to("tpu"), rv_c.to("tpu")

    def f(x, w, b):
        rm, rv = (rm_t, rv_t) if x.device.type == "tpu" else (rm_c, rv_c)
        return F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3, eps=1e-5)
    check(f, x, w, b, atol=1e-4)
    assert_close_cpu(rm_t, rm_c)
    assert_close_cpu(rv_t, rv_c)


def test_batch_norm_eval_and_no_stats():
    x = torch.randn(3, 4, 5, 5)
    rm, rv = torch.randn(4), torch.rand(4) + 0.5
    w, b = torch.randn(4), torch.randn(4)
    def f(x, w, b):
        dev = x.device
        return F.batch_norm(x, rm.to(dev), rv.to(dev), w, b, training=False, eps=1e-3)
    check(f, x, w, b, atol=1e-5)
    check(lambda x: F.batch_norm(x, None, None, training=True), x, atol=1e-4)


def test_batchnorm_module_train_then_eval():
    m_c = torch.nn.BatchNorm2d(3)
    m_t = torch.nn.BatchNorm2d(3).to("tpu")
    x = torch.randn(4, 3, 6, 6)
    for _ in range(2):
        check(lambda x: (m_t if x.device.type == "tpu" else m_c)(x), x, grad=False, atol=1e-5)
    assert_close_cpu(m_t.running_mean, m_c.running_mean)
    assert_close_cpu(m_t.running_var, m_c.running_var)
    assert m_t.num_batches_tracked.item() == 2
    m_c.eval(), m_t.eval()
    check(lambda x: (m_t if x.device.type == "tpu" else m_c)(x), x, atol=1e-5)


@pytest.mark.parametrize("shape,groups,affine", [((2, 6, 4, 4), 3, True), ((3, 4, 5), 2, False),
                                                 ((2, 8), 4, True), ((2, 4, 3, 3), 1, False)])
def test_group_norm(shape, groups, affine):
    c = shape[1]
    x = torch.randn(shape) * 2 + 1
    w = torch.randn(c) if affine else None
    b = torch.randn(c) if affine else None
    check(lambda x, w, b: F.group_norm(x, groups, w, b, eps=1e-5), x, w, b, atol=1e-4)

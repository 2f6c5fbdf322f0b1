"""bfloat16/float16 results round as PyTorch's kernels round them: products and
sums accumulate in float32, then round once. And float32 matmul precision
follows torch.set_float32_matmul_precision through XLA's precision config."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import torch_tpu

from conftest import assert_close_cpu

LOW = [torch.bfloat16, torch.float16]
IDS = ["bf16", "fp16"]


def _one_ulp(dtype):
    # One unit in the last place, relative: an f32-accumulated result rounded once
    # lands within it of PyTorch's (the summation order may differ).
    return dict(rtol=torch.finfo(dtype).eps, atol=torch.finfo(dtype).eps)


def _rand(*shape, dtype):
    return torch.randn(*shape).to(dtype)


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
def test_long_contractions_accumulate_in_float32(dtype):
    # K = 2048: a bfloat16 running sum would be off by many ulps; float32
    # accumulation rounded once agrees with PyTorch's CPU kernels to one ulp.
    torch.manual_seed(0)
    a, b = _rand(8, 2048, dtype=dtype), _rand(2048, 8, dtype=dtype)
    c = _rand(8, 8, dtype=dtype)
    ba, bb = _rand(2, 8, 2048, dtype=dtype), _rand(2, 2048, 8, dtype=dtype)
    v = _rand(2048, dtype=dtype)
    cases = [
        (torch.mm, (a, b)),
        (lambda x, y: x @ y, (a, b)),
        (torch.bmm, (ba, bb)),
        (lambda s, x, y: torch.addmm(s, x, y, beta=0.5, alpha=2.0), (c, a, b)),
        (lambda s, x, y: torch.baddbmm(s, x, y), (c.expand(2, 8, 8).contiguous(), ba, bb)),
        (torch.mv, (a, v)),
        (torch.dot, (v, v)),
        (lambda x, w: F.linear(x, w), (a, b.t().contiguous())),
        (lambda x: x.sum(), (a,)),
        (lambda x: x.sum(1), (a,)),
        (lambda x: x.mean(1), (a,)),
    ]
    for fn, args in cases:
        ref = fn(*args)
        got = fn(*[x.to("tpu") for x in args])
        assert_close_cpu(got, ref, **_one_ulp(dtype))


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
def test_convolution_accumulates_in_float32(dtype):
    torch.manual_seed(0)
    x, w, bias = _rand(2, 64, 9, 9, dtype=dtype), _rand(8, 64, 3, 3, dtype=dtype), _rand(8, dtype=dtype)
    ref = F.conv2d(x, w, bias, padding=1)
    got = F.conv2d(x.to("tpu"), w.to("tpu"), bias.to("tpu"), padding=1)
    # The bias is added after rounding the convolution, as PyTorch does: one more rounding.
    assert_close_cpu(got, ref, rtol=2 * torch.finfo(dtype).eps, atol=2 * torch.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", LOW, ids=IDS)
def test_normalisations_and_softmax(dtype):
    torch.manual_seed(0)
    x = _rand(4, 512, dtype=dtype)
    ln = torch.nn.LayerNorm(512).to(dtype)
    for fn in (lambda t: torch.softmax(t, -1), lambda t: torch.log_softmax(t, -1),
               lambda t: F.layer_norm(t, (512,), ln.weight.to(t.device), ln.bias.to(t.device))):
        assert_close_cpu(fn(x.to("tpu")), fn(x), **_one_ulp(dtype))


def _dumped(tmp_path, fn):
    torch_tpu.cache.clear(memory=True, disk=False)
    torch_tpu.debug.set_dump_dir(tmp_path)
    try:
        fn()
        torch_tpu.synchronize()
    finally:
        torch_tpu.debug.set_dump_dir(None)
    return "\n".join(open(os.path.join(tmp_path, f)).read()
                     for f in sorted(os.listdir(tmp_path)) if f.endswith(".mlir"))


def test_bf16_dot_names_float32_accumulation(tmp_path):
    a = torch.randn(4, 4, device="tpu", dtype=torch.bfloat16)
    text = _dumped(tmp_path, lambda: (a @ a).cpu())
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert dots and all("(tensor<4x4xbf16>, tensor<4x4xbf16>) -> tensor<4x4xf32>" in d for d in dots)
    assert all("precision_config" not in d for d in dots)  # one bf16 pass is exact


@pytest.fixture
def restore_precision():
    prev = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(prev)


@pytest.mark.parametrize("setting,xla", [("highest", "HIGHEST"), ("high", "HIGH"),
                                         ("medium", "DEFAULT")])
def test_float32_matmul_precision_reaches_the_program(setting, xla, tmp_path, restore_precision):
    torch.set_float32_matmul_precision(setting)
    assert torch.tpu.matmul_precision() == xla
    a = torch.randn(4, 4, device="tpu")
    x, w = torch.randn(1, 2, 5, 5, device="tpu"), torch.randn(3, 2, 3, 3, device="tpu")
    text = _dumped(tmp_path, lambda: ((a @ a).cpu(), F.conv2d(x, w).cpu()))
    ops = [line for line in text.splitlines()
           if "stablehlo.dot_general" in line or "stablehlo.convolution" in line]
    assert any("dot_general" in o for o in ops) and any("convolution" in o for o in ops)
    want = f"precision_config = [#stablehlo<precision {xla}>, #stablehlo<precision {xla}>]"
    assert all(want in o for o in ops), ops


def test_precision_is_part_of_the_program_key(restore_precision):
    # The same op at two precisions is two programs; switching back reuses the first.
    a = torch.randn(5, 7, device="tpu")
    b = torch.randn(7, 3, device="tpu")
    torch_tpu.synchronize()  # Defer & Fuse: a and b exist before the programs counted
    torch_tpu.cache.clear(memory=True, disk=False)

    def misses():  # single-op programs (Strict Eager) and fused ones (Defer & Fuse)
        m = torch_tpu.debug.metrics()
        return m["cache_misses"] + m["fused_cache_misses"]

    start = misses()
    torch.set_float32_matmul_precision("highest")
    r1 = (a @ b).cpu()
    torch.set_float32_matmul_precision("medium")
    r2 = (a @ b).cpu()
    torch.set_float32_matmul_precision("highest")
    r3 = (a @ b).cpu()
    assert misses() - start == 2
    # XLA:CPU computes float32 in float32 whatever the config: all three agree with the CPU.
    ref = a.cpu() @ b.cpu()
    for r in (r1, r2, r3):
        torch.testing.assert_close(r, ref)


def test_highest_is_the_default_and_matches_the_cpu():
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.tpu.matmul_precision() == "HIGHEST"
    torch.manual_seed(0)
    a, b = torch.randn(16, 300), torch.randn(300, 16)
    # Sums of 300 products of size ~17: float32 reassociation alone moves ~1e-5.
    assert_close_cpu(a.to("tpu") @ b.to("tpu"), a @ b, atol=5e-5)


_FIRST_SIGNATURE_WITHOUT_A_DOT = r"""
import os, sys, torch, torch_tpu
torch_tpu.debug.set_dump_dir(sys.argv[1])
torch.set_float32_matmul_precision("medium")
i = torch.ones(2, 3, 3, dtype=torch.int32, device="tpu")
(i @ i).cpu()  # bmm's first program: an integer product, no precision config
a = torch.randn(2, 3, 3, device="tpu")
(a @ a).cpu()  # float32: must follow the setting although bmm's first program did not
torch_tpu.synchronize()
"""


def test_precision_followed_after_a_first_program_without_a_dot(tmp_path):
    # An op's keys carry the setting only once one of its programs depended on
    # it; the first such program, in a fresh process, must still honour it.
    subprocess.run([sys.executable, "-c", _FIRST_SIGNATURE_WITHOUT_A_DOT, str(tmp_path)],
                   check=True, timeout=300)
    text = "\n".join(open(os.path.join(tmp_path, f)).read()
                     for f in sorted(os.listdir(tmp_path)) if f.endswith(".mlir"))
    dots = [line for line in text.splitlines() if "stablehlo.dot_general" in line and "f32" in line]
    assert dots and all("#stablehlo<precision DEFAULT>" in d for d in dots), dots

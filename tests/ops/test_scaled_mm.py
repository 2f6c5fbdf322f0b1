"""torch._scaled_mm on tpu (csrc/lower/scaled_mm.cc) against PyTorch's CPU kernel:
tensor-wise and row-wise float32 scales, out_dtype float32/bfloat16/float16/float8,
bias, scale_result, mixed float8 operands, shapes that are not multiples of 16, and
bad input. The tpu product sums the float8 operands in float32 and scales the sums;
the CPU scales first, so results agree to float32 rounding before the final cast
(float8 and 16-bit outputs may differ by one unit in the last place)."""
import pytest
import torch

import torch_tpu  # noqa: F401

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def operands(m, k, n, a_dtype=E4M3, b_dtype=E4M3, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 4).to(a_dtype)
    b = (torch.randn(n, k, generator=g) * 4).to(b_dtype).t()  # column-major, as CUDA wants
    return a, b


def to_tpu(v):
    return v.to("tpu") if isinstance(v, torch.Tensor) else v


def ulp(dtype):
    if dtype in (torch.float32, torch.bfloat16, torch.float16):
        return torch.finfo(dtype).eps
    return {E4M3: 2.0**-3, E5M2: 2.0**-2, torch.float8_e4m3fnuz: 2.0**-3,
            torch.float8_e5m2fnuz: 2.0**-2}[dtype]


def check(a, b, scale_a, scale_b, **kw):
    want = torch._scaled_mm(a, b, scale_a, scale_b, **kw)
    got = torch._scaled_mm(to_tpu(a), to_tpu(b), to_tpu(scale_a), to_tpu(scale_b),
                           **{k: to_tpu(v) for k, v in kw.items()})
    assert got.device.type == "tpu"
    assert got.dtype == want.dtype and got.shape == want.shape
    out_dtype = got.dtype
    got, want = got.cpu().float(), want.float()
    assert torch.equal(got.isnan(), want.isnan())
    ok = ~want.isnan()
    # One unit in the last place of the result (float32: summation-order rounding),
    # plus a floor at the matrix's scale where sums cancel.
    tol = 1e-5 if out_dtype == torch.float32 else ulp(out_dtype)
    finite = want[ok & want.isfinite()]
    scale = max(finite.abs().max().item(), 1.0) if finite.numel() else 1.0
    torch.testing.assert_close(got[ok], want[ok], rtol=tol, atol=max(tol * 1e-2 * scale, 2.0**-9))
    return got


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, torch.float16, E4M3, E5M2, None],
                         ids=["f32", "bf16", "f16", "e4m3fn", "e5m2", "default"])
def test_tensorwise(out_dtype):
    a, b = operands(32, 64, 48)
    check(a, b, torch.tensor(0.37), torch.tensor(1.9), out_dtype=out_dtype)


@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16, E4M3], ids=["f32", "bf16", "e4m3fn"])
def test_rowwise(out_dtype):
    a, b = operands(32, 64, 48, seed=1)
    g = torch.Generator().manual_seed(5)
    check(a, b, torch.rand(32, 1, generator=g) + 0.5, torch.rand(1, 48, generator=g) + 0.5,
          out_dtype=out_dtype)


@pytest.mark.parametrize("shape", [(16, 16, 16), (5, 7, 3), (1, 33, 17), (64, 128, 32)],
                         ids=lambda s: "x".join(map(str, s)))
def test_shapes(shape):
    # The CPU takes any shape and layout; so does tpu (CUDA wants multiples of 16).
    m, k, n = shape
    a, b = operands(m, k, n, seed=2)
    check(a, b, torch.tensor(0.5), torch.tensor(2.0), out_dtype=torch.float32)
    check(a, b.contiguous(), torch.tensor([0.5]), torch.tensor([[2.0]]), out_dtype=torch.bfloat16)


@pytest.mark.parametrize("bias_dtype", [torch.float32, torch.bfloat16])
def test_bias(bias_dtype):
    a, b = operands(24, 32, 40, seed=3)
    bias = torch.randn(40).to(bias_dtype)
    check(a, b, torch.tensor(0.25), torch.tensor(3.0), bias=bias, out_dtype=torch.bfloat16)
    check(a, b, torch.rand(24, 1) + 0.1, torch.rand(1, 40) + 0.1, bias=bias, out_dtype=torch.float32)


def test_scale_result_and_saturation():
    # scale_result divides float8_e4m3fn / e5m2 results (it is ignored for other outputs);
    # large products saturate (e4m3fn) or overflow to inf (e5m2) as the CPU's casts do.
    a, b = operands(16, 32, 16, seed=4)
    for out_dtype in (E4M3, E5M2, torch.bfloat16):
        for sr in (torch.tensor(4.0), torch.tensor(0.01)):
            check(a, b, torch.tensor(1.0), torch.tensor(1.0), scale_result=sr, out_dtype=out_dtype)
    big = check(a, b, torch.tensor(100.0), torch.tensor(100.0), out_dtype=E4M3)
    assert big.abs().max() == 448
    assert check(a, b, torch.tensor(300.0), torch.tensor(300.0), out_dtype=E5M2).isinf().any()


def test_mixed_and_fnuz_operands():
    a, b = operands(16, 48, 32, a_dtype=E4M3, b_dtype=E5M2, seed=6)
    check(a, b, torch.tensor(1.5), torch.tensor(0.5), out_dtype=torch.float32)
    a, b = operands(16, 48, 32, a_dtype=torch.float8_e4m3fnuz, b_dtype=torch.float8_e4m3fnuz, seed=7)
    check(a, b, torch.tensor(1.5), torch.tensor(0.5), out_dtype=torch.bfloat16)


@pytest.mark.strict_only
def test_compiled():
    def f(a, b, sa, sb, bias):
        return torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)

    a, b = operands(32, 64, 48, seed=8)
    sa, sb, bias = torch.rand(32, 1) + 0.5, torch.rand(1, 48) + 0.5, torch.randn(48).bfloat16()
    want = f(a, b, sa, sb, bias).float()
    got = torch.compile(f, backend="tpu")(*map(to_tpu, (a, b, sa, sb, bias))).cpu().float()
    torch.testing.assert_close(got, want, rtol=2**-7, atol=1e-2)


def test_bad_input():
    a, b = operands(32, 64, 48)
    one = torch.tensor(1.0, device="tpu")
    ta, tb = a.to("tpu"), b.to("tpu")
    with pytest.raises(ValueError, match="invalid scaling configuration"):
        torch._scaled_mm(ta, tb, torch.ones(31, 1, device="tpu"), torch.ones(1, 48, device="tpu"))
    with pytest.raises(ValueError, match="invalid scaling configuration"):
        torch._scaled_mm(ta, tb, torch.ones(32, 1, device="tpu"), torch.ones(48, 1, device="tpu"))
    with pytest.raises(ValueError, match="invalid scaling configuration"):
        torch._scaled_mm(ta, tb, one, torch.ones(1, 48, device="tpu"))  # tensor-wise with row-wise
    with pytest.raises(ValueError, match="invalid scaling configuration"):
        torch._scaled_mm(ta, tb, one.bfloat16(), one)
    with pytest.raises(RuntimeError, match="float8"):
        torch._scaled_mm(ta.float(), tb.float(), one, one)
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        torch._scaled_mm(ta, tb[:40], one, one)
    with pytest.raises(RuntimeError, match="bias must be size 48"):
        torch._scaled_mm(ta, tb, one, one, bias=torch.ones(40, device="tpu"), out_dtype=torch.float32)
    with pytest.raises(RuntimeError, match="scale_result"):
        torch._scaled_mm(ta, tb, one, one, scale_result=torch.ones(2, device="tpu"))
    # The tpu device still works afterwards.
    assert torch._scaled_mm(ta, tb, one, one, out_dtype=torch.float32).shape == (32, 48)

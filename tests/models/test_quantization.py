"""torch_tpu.quantization configs (and torchao's own int8 weight-only) through torchao's
quantize_ on tpu, against the same quantised model on PyTorch's CPU backend: int4 packs
the same bits and dequantises to the same float32 weights, float8 matches torchao's
Float8Tensor computed on the CPU, nothing falls back to the CPU, and the quantised
weights take the memory they should (measured through the allocator)."""
import pytest
import torch

import torch_tpu
from conftest import run_python

pytest.importorskip("torchao")
from torchao.quantization import quantize_  # noqa: E402

from torch_tpu.quantization import (  # noqa: E402
    TpuFloat8DynamicActivationFloat8WeightConfig, Int4PackedTensor, TpuInt4WeightOnlyConfig)


def mlp(dtype=torch.float32, k=256, n=512):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(k, n), torch.nn.ReLU(),
                               torch.nn.Linear(n, 128)).to(dtype)


def no_fallback_since(before):
    after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    return {k: v for k, v in after.items() if v != before.get(k, 0)}


@pytest.mark.parametrize("group_size", [32, 64, 128, 256])
def test_int4_matches_cpu(group_size):
    ref = mlp()
    got = mlp().to("tpu")
    quantize_(ref, TpuInt4WeightOnlyConfig(group_size=group_size))
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    quantize_(got, TpuInt4WeightOnlyConfig(group_size=group_size))
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
    y = got(x.to("tpu")).cpu()
    assert no_fallback_since(before) == {}
    for r, g in ((ref[0], got[0]), (ref[2], got[2])):
        assert isinstance(g.weight, Int4PackedTensor) and g.weight.qdata.dtype == torch.uint8
        assert g.weight.qdata.shape == (r.weight.shape[0], r.weight.shape[1] // 2)
        assert torch.equal(g.weight.qdata.cpu(), r.weight.qdata)
        assert torch.equal(g.weight.dequantize().cpu(), r.weight.dequantize())  # bit-exact
    torch.testing.assert_close(y, ref(x), rtol=1e-5, atol=1e-5)
    # The quantisation error is that of 4 bits per group, not garbage.
    w = mlp()[0].weight
    assert (ref[0].weight.dequantize() - w).abs().max() <= (w.abs().max() * 2 / 15)


def test_int4_bfloat16_weights():
    ref, got = mlp(torch.bfloat16), mlp(torch.bfloat16).to("tpu")
    quantize_(ref, TpuInt4WeightOnlyConfig(64))
    quantize_(got, TpuInt4WeightOnlyConfig(64))
    assert got[0].weight.scale.dtype == torch.bfloat16
    assert torch.equal(got[0].weight.dequantize().cpu(), ref[0].weight.dequantize())
    x = torch.randn(4, 256).to(torch.bfloat16)
    torch.testing.assert_close(got(x.to("tpu")).cpu(), ref(x), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("granularity,f8", [("tensor", torch.float8_e4m3fn), ("row", torch.float8_e4m3fn),
                                            ("tensor", torch.float8_e4m3fnuz)],
                         ids=["tensor", "row", "tensor_fnuz"])
def test_float8_matches_cpu_float8tensor(granularity, f8):
    from torchao.quantization.granularity import PerRow, PerTensor
    from torchao.quantization.quantize_.workflows import Float8Tensor
    dtype = torch.bfloat16 if granularity == "row" else torch.float32
    gran = PerRow() if granularity == "row" else PerTensor()
    got = mlp(dtype).to("tpu")
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    quantize_(got, TpuFloat8DynamicActivationFloat8WeightConfig(
        granularity=gran, activation_dtype=f8, weight_dtype=f8))
    # The reference: the same Float8Tensor weights built on the CPU (torchao's own
    # config refuses the CPU, so the handler's one call is made directly).
    ref = mlp(dtype)
    for i in (0, 2):
        g = got[i].weight
        assert isinstance(g, Float8Tensor)
        assert g.qdata.dtype == f8
        w = Float8Tensor.from_hp(ref[i].weight.detach(), float8_dtype=f8,
                                 granularity=gran, mm_config=g.mm_config,
                                 kernel_preference=g.kernel_preference,
                                 act_quant_kwargs=g.act_quant_kwargs)
        ref[i].weight = torch.nn.Parameter(w, requires_grad=False)
        assert torch.equal(g.qdata.cpu().view(torch.uint8), w.qdata.view(torch.uint8))
        torch.testing.assert_close(g.scale.cpu(), w.scale, rtol=0, atol=0)
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(1)).to(dtype)
    y = got(x.to("tpu")).cpu()
    assert no_fallback_since(before) == {}
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(y, ref(x), rtol=tol, atol=tol)


@pytest.mark.strict_only
def test_int4_and_float8_under_torch_compile():
    torch._dynamo.reset()
    x = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
    for config in (TpuInt4WeightOnlyConfig(128), TpuFloat8DynamicActivationFloat8WeightConfig()):
        ref, got = mlp(), mlp().to("tpu")
        quantize_(got, config)
        with torch.no_grad():  # inference: _scaled_mm has no derivative (as in PyTorch)
            eager = got(x.to("tpu")).cpu()
            compiled = torch.compile(got, backend="tpu")(x.to("tpu")).cpu()
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


@pytest.mark.strict_only
def test_weight_memory_through_the_allocator():
    from torchao.quantization import Int8WeightOnlyConfig

    def weight_bytes(config):
        torch.tpu.synchronize()
        start = torch.tpu.memory_allocated()
        m = mlp(k=1024, n=1024).to("tpu")
        if config is not None:
            quantize_(m, config)
        torch.tpu.synchronize()
        used = torch.tpu.memory_allocated() - start
        y = m(torch.randn(2, 1024).to("tpu")).cpu()  # still runs
        assert torch.isfinite(y).all()
        del m
        return used

    fp32 = weight_bytes(None)
    assert fp32 >= (1024 * 1024 + 1024 * 128) * 4
    assert weight_bytes(Int8WeightOnlyConfig()) <= 0.27 * fp32
    assert weight_bytes(TpuInt4WeightOnlyConfig(128)) <= 0.15 * fp32


@pytest.mark.strict_only
def test_bad_input_raises():
    with pytest.raises(ValueError, match="group_size"):
        TpuInt4WeightOnlyConfig(group_size=48)
    m = torch.nn.Linear(96, 8).to("tpu")
    with pytest.raises(ValueError, match="not divisible"):
        quantize_(m, TpuInt4WeightOnlyConfig(group_size=64))
    from torchao.quantization.granularity import PerRow
    m = torch.nn.Linear(64, 32).to("tpu")  # float32 weights
    with pytest.raises(ValueError, match="bfloat16"):
        quantize_(m, TpuFloat8DynamicActivationFloat8WeightConfig(granularity=PerRow()))


@pytest.mark.strict_only
def test_import_is_lazy_and_registration_works():
    r = run_python("""
        import sys, torch, torch_tpu
        assert "torchao" not in sys.modules, "import torch_tpu imported torchao"
        from torchao.quantization import quantize_
        from torch_tpu.quantization import TpuInt4WeightOnlyConfig
        m = torch.nn.Linear(64, 16).to("tpu")
        quantize_(m, TpuInt4WeightOnlyConfig(32))
        print(type(m.weight).__name__, tuple(m(torch.ones(2, 64, device="tpu")).shape))
    """)
    assert r.returncode == 0, r.stderr
    assert "Int4PackedTensor (2, 16)" in r.stdout

"""torch_tpu.kernels.stablehlo_op: a hand-written StableHLO module as a PyTorch op,
inlined into the program of every execution mode."""
import os

import pytest
import torch

import torch_tpu
import torch_tpu._C as _C
from conftest import assert_close_cpu
from torch_tpu.kernels import stablehlo_op

# x * sigmoid(x) + y, with a private helper function (symbols get renamed when inlined),
# in the form JAX prints (argument and result attributes included).
SILU_ADD = """
module @jit_silu_add attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32> {mhlo.sharding = "{replicated}"}, %arg1: tensor<4x8xf32>) -> (tensor<4x8xf32> {jax.result_info = "result"}) {
    %0 = call @silu(%arg0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
    %1 = stablehlo.add %0, %arg1 : tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
  func.func private @silu(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %0 = stablehlo.logistic %arg0 : tensor<4x8xf32>
    %1 = stablehlo.multiply %arg0, %0 : tensor<4x8xf32>
    return %1 : tensor<4x8xf32>
  }
}
"""

# Two results: row sums and the input doubled.
SUM_AND_DOUBLE = """
module @m {
  func.func public @main(%arg0: tensor<3x5xf64>) -> (tensor<3xf64>, tensor<3x5xf64>) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f64>
    %0 = stablehlo.reduce(%arg0 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<3x5xf64>, tensor<f64>) -> tensor<3xf64>
    %1 = stablehlo.add %arg0, %arg0 : tensor<3x5xf64>
    return %0, %1 : tensor<3xf64>, tensor<3x5xf64>
  }
}
"""

silu_add = stablehlo_op("shlo_test::silu_add", SILU_ADD, schema="(Tensor x, Tensor y) -> Tensor")
sum_double = stablehlo_op("shlo_test::sum_double", SUM_AND_DOUBLE)


def ref_silu_add(x, y):
    return torch.nn.functional.silu(x) + y


def test_registered_with_schema_and_fake_shapes():
    assert torch.ops.shlo_test.silu_add is silu_add
    assert "shlo_test::silu_add" in _C._lowering_names()
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        out = silu_add(torch.empty(4, 8), torch.empty(4, 8))
        s, d = sum_double(torch.empty(3, 5, dtype=torch.float64))
    assert out.shape == (4, 8) and out.dtype == torch.float32
    assert s.shape == (3,) and d.shape == (3, 5) and s.dtype == torch.float64


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_matches_cpu(mode):
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with torch_tpu.execution_mode(mode):
        out = silu_add(x.to("tpu"), y.to("tpu"))
        s, d = sum_double(x.double()[:3, :5].contiguous().to("tpu"))
    assert_close_cpu(out, ref_silu_add(x, y))
    assert_close_cpu(s, x.double()[:3, :5].sum(1))
    assert_close_cpu(d, x.double()[:3, :5] * 2)


def test_fused_step_adds_no_launch():
    """The kernel sits inside the fused program: one launch with or without it."""
    x, y = torch.randn(4, 8, device="tpu"), torch.randn(4, 8, device="tpu")

    def step(use_kernel):
        a = x * 2
        b = silu_add(a, y) if use_kernel else a + y
        return (b - 1).sum()

    launches = []
    for use_kernel in (False, True):
        with torch_tpu.execution_mode("defer_and_fuse"):
            step(use_kernel)  # warm: compile
        before = torch_tpu.debug.metrics()["executions"]
        with torch_tpu.execution_mode("defer_and_fuse"):
            out = step(use_kernel)
            out.cpu()
        launches.append(torch_tpu.debug.metrics()["executions"] - before)
    assert launches[1] == launches[0] == 1, launches
    ref = (ref_silu_add(x.cpu() * 2, y.cpu()) - 1).sum()
    assert_close_cpu(out, ref)


def test_compile_one_graph_no_break():
    from torch._dynamo.utils import counters
    counters.clear()
    torch._dynamo.reset()

    def f(x, y):
        return silu_add(x * 2, y).relu() + 1

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    out = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"), y.to("tpu"))
    assert_close_cpu(out, ref_silu_add(x * 2, y).relu() + 1)
    assert sum(counters["graph_break"].values()) == 0
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


def test_second_call_compiles_nothing():
    x, y = torch.randn(4, 8, device="tpu"), torch.randn(4, 8, device="tpu")
    silu_add(x, y).cpu()
    before = torch_tpu.debug.metrics()["programs_compiled"]
    silu_add(y, x).cpu()
    assert torch_tpu.debug.metrics()["programs_compiled"] == before


def test_dump_shows_inlined_module(tmp_path):
    torch_tpu._C._set_dump_dir(str(tmp_path))
    try:
        # A program no other test built (the dump is written when a program compiles).
        with torch_tpu.execution_mode("defer_and_fuse"):
            x, y = torch.randn(4, 8, device="tpu"), torch.randn(4, 8, device="tpu")
            silu_add(x, y).tanh().cumsum(0).flip(1).cpu()
    finally:
        torch_tpu._C._set_dump_dir("")
    texts = [open(os.path.join(r, f)).read() for r, _, fs in os.walk(tmp_path) for f in fs
             if f.endswith(".mlir")]
    assert any("func.call" in t and "stablehlo.logistic" in t for t in texts), os.listdir(tmp_path)


def test_shape_and_dtype_mismatch_raise():
    with pytest.raises(ValueError, match=r"shape \(4, 9\).*takes \(4, 8\)"):
        silu_add(torch.randn(4, 9, device="tpu"), torch.randn(4, 9, device="tpu"))
    with pytest.raises(TypeError, match="dtype torch.float64"):
        silu_add(torch.randn(4, 8, device="tpu").double(), torch.randn(4, 8, device="tpu"))


def test_bad_module_and_schema_raise():
    with pytest.raises(ValueError, match="no function @main"):
        stablehlo_op("shlo_test::nomain", "module { func.func public @f(%a: tensor<2xf32>) -> "
                     "tensor<2xf32> { return %a : tensor<2xf32> } }")
    with pytest.raises(ValueError, match="must take 2 Tensors"):
        stablehlo_op("shlo_test::badschema", SILU_ADD, schema="(Tensor x) -> Tensor")
    with pytest.raises(ValueError, match="namespace::name"):
        stablehlo_op("no_namespace", SILU_ADD)

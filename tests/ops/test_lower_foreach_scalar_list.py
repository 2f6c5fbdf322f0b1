"""_foreach_* ops with a list of scalars (AdamW's bias corrections, per-parameter
step sizes): the values match the CPU, and the program converts each scalar once."""
import os

import torch
import torch_tpu

from conftest import assert_close_cpu

N = 16


def tensors(device, first=3):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(first + i, generator=g).to(device) for i in range(N)]


def test_foreach_scalar_lists_match_the_cpu():
    scalars = [0.5 + i / 7 for i in range(N)]
    cpu, tpu = tensors("cpu"), tensors("tpu")
    for x, y in zip(torch._foreach_mul(tpu, scalars), torch._foreach_mul(cpu, scalars)):
        assert_close_cpu(x, y)
    t1c, t2c = tensors("cpu"), [t.abs() + 1 for t in tensors("cpu")]
    t1t, t2t = [t.to("tpu") for t in t1c], [t.to("tpu") for t in t2c]
    torch._foreach_addcdiv_(cpu, t1c, t2c, scalars)
    torch._foreach_addcdiv_(tpu, t1t, t2t, scalars)
    for x, y in zip(tpu, cpu):
        assert_close_cpu(x, y, rtol=1e-6, atol=1e-6)


def test_a_scalar_list_op_converts_each_scalar_once(tmp_path):
    # It converted the whole list for every tensor: N^2 converts per op (15,000
    # dead ones in the UNet's training step program).
    xs = tensors("tpu", first=5)  # shapes no other test compiled a program for
    torch.tpu.synchronize()
    torch_tpu.cache.clear(memory=True, disk=False)
    torch_tpu.debug.set_dump_dir(tmp_path)
    try:
        out = torch._foreach_mul(xs, [0.5 + i / 7 for i in range(N)])
        out[0].cpu()
    finally:
        torch_tpu.debug.set_dump_dir(None)
    mlirs = [(tmp_path / f).read_text() for f in os.listdir(tmp_path) if f.endswith(".mlir")]
    assert mlirs
    converts = sum(m.count("stablehlo.convert") for m in mlirs)
    assert converts <= 2 * N, converts


def test_each_scalar_is_its_own_parameter_and_new_values_do_not_recompile(tmp_path):
    # Sliced out of one list parameter, each tensor's kernel held its own constant
    # index, so XLA compiled one kernel per tensor (AdamW on the GPT's 52 parameters:
    # 52 kernels, 5x the compile time of one per shape). One parameter per scalar.
    xs = [torch.randn(4, 3 + i % 2).to("tpu") for i in range(6)]  # shapes new here
    torch.tpu.synchronize()
    torch_tpu.cache.clear(memory=True, disk=False)
    torch_tpu.debug.set_dump_dir(tmp_path)
    try:
        first = torch._foreach_div(xs, [1.0 + i for i in range(6)])
        first[0].cpu()
    finally:
        torch_tpu.debug.set_dump_dir(None)
    mlirs = [(tmp_path / f).read_text() for f in os.listdir(tmp_path) if f.endswith(".mlir")]
    div = [m for m in mlirs if "stablehlo.divide" in m]
    assert div and "stablehlo.slice" not in div[0]
    assert div[0].count("tensor<f64>") >= 6
    compiled = torch_tpu.debug.metrics()["programs_compiled"]
    ints = [torch.arange(5).to("tpu") for _ in range(3)]
    again = torch._foreach_div(xs, [3.0 - i / 4 for i in range(6)])  # other values: no compile
    assert torch_tpu.debug.metrics()["programs_compiled"] == compiled
    for x, y, s in zip(again, xs, [3.0 - i / 4 for i in range(6)]):
        assert_close_cpu(x, y.cpu() / s)
    for x, y in zip(torch._foreach_mul(ints, [2, -3, 4]), [torch.arange(5) * k for k in (2, -3, 4)]):
        assert torch.equal(x.cpu(), y)

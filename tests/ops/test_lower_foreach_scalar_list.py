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

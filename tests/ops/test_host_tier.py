"""The host tier (csrc/aten/host_tier.h): tiny integer/bool ops whose shapes keep
changing run with the CPU kernel instead of compiling a program per shape; exact
results, counted in metrics()["host_tier_ops"], never as CPU fallback."""
import pytest
import torch
import torch_tpu

pytestmark = pytest.mark.strict_only


def _m():
    m = torch_tpu.debug.metrics()
    # A compile-cache disk hit (a program compiled by an earlier test) stands for a compile.
    return m["programs_compiled"] + m.get("disk_hits", 0), m["host_tier_ops"], m["cpu_fallback_ops"]


def test_growing_int_cat_compiles_at_most_twice_then_runs_on_host():
    torch_tpu.debug.clear_program_cache()
    x_c = torch.arange(5, dtype=torch.int64).reshape(1, 5)
    x = x_c.to("tpu")
    one = torch.tensor([[7]]).to("tpu")
    c0, h0, f0 = _m()
    compiles = []
    for _ in range(8):
        before = _m()[0]
        x = torch.cat([x, one], dim=1)
        x_c = torch.cat([x_c, torch.tensor([[7]])], dim=1)
        compiles.append(_m()[0] - before)
    assert torch.equal(x.cpu(), x_c)
    assert sum(compiles[:2]) <= 2 and compiles[2:] == [0] * 6, compiles
    c1, h1, f1 = _m()
    assert h1 - h0 >= 6 and f1 == f0


def test_float_ops_of_changing_shape_still_compile():
    torch_tpu.debug.clear_program_cache()
    x = torch.ones(1, 3).to("tpu")
    c0, h0, _ = _m()
    for _ in range(4):
        x = torch.cat([x, x[:, :1]], dim=1)
    c1, h1, _ = _m()
    assert h1 == h0 and c1 - c0 >= 4
    assert torch.equal(x.cpu(), torch.ones(1, 7))


def test_same_shape_int_op_compiles_once_then_hits():
    torch_tpu.debug.clear_program_cache()
    a = torch.arange(6).to("tpu")
    c0, h0, _ = _m()
    for k in range(5):
        r = a + k
    c1, h1, _ = _m()
    assert c1 - c0 == 1 and h1 == h0
    assert torch.equal(r.cpu(), torch.arange(6) + 4)


def test_large_int_tensors_still_compile():
    torch_tpu.debug.clear_program_cache()
    x = torch.zeros(1, 20000, dtype=torch.int64).to("tpu")  # 160 KB: past the bound
    c0, h0, _ = _m()
    for _ in range(3):
        x = torch.cat([x, x[:, :1]], dim=1)
    c1, h1, _ = _m()
    assert h1 == h0 and c1 - c0 >= 3
    assert x.shape == (1, 20003)


def test_in_place_int_op_on_host_updates_the_storage():
    torch_tpu.debug.clear_program_cache()
    for n in (3, 4, 5, 6):
        t = torch.arange(n).to("tpu")
        t.add_(10)
        assert torch.equal(t.cpu(), torch.arange(n) + 10)


def test_host_tier_results_take_the_compiled_layout():
    """A result of a transposed input keeps its permuted layout (the meta kernel's, as
    the compiled program gives it and the CPU does), also when the host tier runs it."""
    torch_tpu.debug.clear_program_cache()
    h0 = _m()[1]
    for n in (3, 4, 5, 6):
        a_c = torch.arange(4 * n).reshape(n, 4).t()
        want = a_c * 3
        got = a_c.to("tpu") * 3  # .to keeps the strides: a transposed tpu input
        assert a_c.to("tpu").stride() == a_c.stride()
        with torch_tpu.debug.host_tier(False):
            compiled = a_c.to("tpu") * 3
        assert got.stride() == compiled.stride() == want.stride() == (1, 4), n
        assert torch.equal(got.cpu(), want) and torch.equal(compiled.cpu(), want)
    assert _m()[1] - h0 >= 2

"""Defer & Fuse runs a trace whose shapes keep changing node by node instead of
compiling a fused program per shape (csrc/aten/trace_by_node.h); stable traces still
compile one fused program and hit it."""
import pytest
import torch
import torch_tpu

pytestmark = pytest.mark.strict_only  # each test picks its mode itself


def _compiled():
    m = torch_tpu.debug.metrics()  # a compile-cache disk hit stands for a compile
    return m["programs_compiled"] + m.get("disk_hits", 0)


def _by_node():
    return torch_tpu._C._deferred_stats()["graphs_run_by_node"]


def _fresh():
    torch_tpu.debug.clear_program_cache()
    torch_tpu._C._clear_fused_cache()


def _step(w, x):
    """A float reduction (stable shape), its argmax, and a column cat (growing)."""
    y = (w * 2 + 1).sum(0)
    nxt = y.argmax().reshape(1, 1) + x[:, -1:]
    return torch.cat([x, nxt], dim=1)


def test_growing_trace_compiles_nothing_after_the_second_step():
    _fresh()
    w_c = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    x_c = torch.arange(3).reshape(1, 3)
    w, x = w_c.to("tpu"), x_c.to("tpu")
    compiles, hosts = [], []
    b0 = _by_node()
    with torch_tpu.execution_mode("defer_and_fuse"):
        for _ in range(8):
            c0, h0 = _compiled(), torch_tpu.debug.metrics()["host_tier_ops"]
            x = _step(w, x)
            got = x.cpu()  # the flush
            compiles.append(_compiled() - c0)
            hosts.append(torch_tpu.debug.metrics()["host_tier_ops"] - h0)
            x_c = _step(w_c, x_c)
            assert torch.equal(got, x_c)
    assert compiles[0] == 1 and compiles[2:] == [0] * 6, compiles
    assert _by_node() - b0 == 7
    assert all(h >= 1 for h in hosts[1:]), hosts  # the cat ran on the host


def test_stable_trace_is_one_fused_program():
    _fresh()
    w_c = torch.randn(4, 5, generator=torch.Generator().manual_seed(1))
    x_c = torch.arange(3).reshape(1, 3)
    w, x = w_c.to("tpu"), x_c.to("tpu")
    s0, b0 = torch_tpu._C._deferred_stats(), _by_node()
    compiles = []
    with torch_tpu.execution_mode("defer_and_fuse"):
        for _ in range(6):
            c0 = _compiled()
            x = (w * 2 + 1).sum(0)[:3].argsort().reshape(1, 3) + x
            got = x.cpu()
            compiles.append(_compiled() - c0)
            x_c = (w_c * 2 + 1).sum(0)[:3].argsort().reshape(1, 3) + x_c
            assert torch.equal(got, x_c)
    s1 = torch_tpu._C._deferred_stats()
    assert compiles == [1] + [0] * 5, compiles
    assert s1["fused_cache_misses"] - s0["fused_cache_misses"] == 1
    assert s1["fused_cache_hits"] - s0["fused_cache_hits"] == 5
    assert _by_node() == b0


def test_in_place_write_of_a_growing_int_buffer_runs_by_node_exactly():
    """An in-place add into a view of a storage whose length changes each step: the
    node-by-node run writes the storage back, and the float node next to it stays exact."""
    _fresh()
    b0 = _by_node()
    with torch_tpu.execution_mode("defer_and_fuse"):
        for n in range(4, 10):
            t_c = torch.arange(n, dtype=torch.int32).reshape(1, n)
            f_c = torch.linspace(0, 1, 6)
            t, f = t_c.to("tpu"), f_c.to("tpu")
            t[:, 1:].add_(5)
            g = f * 3
            t_c[:, 1:].add_(5)
            assert torch.equal(t.cpu(), t_c)
            assert torch.equal(g.cpu(), f_c * 3)
    assert _by_node() - b0 >= 4


def test_host_tier_off_compiles_every_shape(monkeypatch):
    # the fused path itself, one program per shape (Defer & Fuse's buckets would
    # serve the later shapes from their bucket's program: tests/compile/test_deferred_buckets.py)
    monkeypatch.setenv("TORCH_TPU_DEFER_BUCKETS", "0")
    _fresh()
    w = torch.randn(4, 5).to("tpu")
    x = torch.arange(3).reshape(1, 3).to("tpu")
    b0 = _by_node()
    with torch_tpu.debug.host_tier(False), torch_tpu.execution_mode("defer_and_fuse"):
        for _ in range(4):
            c0 = _compiled()
            x = _step(w, x)
            x.cpu()
            assert _compiled() - c0 >= 1
    assert _by_node() == b0


def test_a_node_seen_with_other_sizes_makes_a_new_trace_run_by_node_at_once():
    """A trace seen for the first time still runs node by node when one of its tiny
    exact nodes (here the cat) was seen before, in another trace, with other sizes:
    its fused program would not run again either (generate()'s loop traces, whose cat
    first ran in the prefill's trace)."""
    _fresh()
    x_c = torch.arange(3).reshape(1, 3)
    x = x_c.to("tpu")
    with torch_tpu.execution_mode("defer_and_fuse"):
        y = torch.cat([x, x[:, -1:] + 1], dim=1)
        y.cpu()  # trace A: a first sighting, nothing known to vary: fused
        b0, c0 = _by_node(), _compiled()
        z = torch.cat([y, y[:, -1:] * 2], dim=1)
        got = z.cpu()  # trace B: new, but its cat had other sizes in A
    y_c = torch.cat([x_c, x_c[:, -1:] + 1], dim=1)
    assert torch.equal(got, torch.cat([y_c, y_c[:, -1:] * 2], dim=1))
    assert _by_node() - b0 == 1
    assert _compiled() == c0  # both nodes ran on the host


def _grow_floats(x):
    """Float nodes that only move, select or compare values: where, cat, argmax."""
    col = torch.where(x[:, -1:] > 2, x[:, :1], x[:, -1:])
    x = torch.cat([x, col, x[:, 2:3]], dim=1)
    return x, torch.cat([x.argmax(1), x[:, 2:].argmax(1)])


def test_value_moving_float_nodes_run_on_the_host_with_the_cpu_bits():
    """where, cat, argmax and comparisons do no arithmetic on floats, so PyTorch's CPU
    kernels give the lowering's bits (argmax: NaN counts as the largest, ties go to the
    lowest index): a growing float trace of them compiles nothing after its second
    step and matches the CPU exactly."""
    _fresh()
    base = torch.tensor([[1.0, float("nan"), 3.0, 3.0, -0.0]])
    x_c, x = base.clone(), base.to("tpu")
    compiles = []
    with torch_tpu.execution_mode("defer_and_fuse"):
        for _ in range(6):
            c0 = _compiled()
            x, a = _grow_floats(x)
            got_x, got_a = x.cpu(), a.cpu()
            compiles.append(_compiled() - c0)
            x_c, a_c = _grow_floats(x_c)
            assert torch.equal(got_x.isnan(), x_c.isnan())
            assert torch.equal(got_x.nan_to_num(), x_c.nan_to_num())
            assert torch.equal(got_x.signbit(), x_c.signbit())
            assert torch.equal(got_a, a_c)
    assert compiles[2:] == [0] * 4, compiles


def test_a_write_after_a_device_check_fuses_so_a_failing_check_still_undoes_it():
    """A fused program undoes the in-place writes at or after a failing device-side
    check; one node at a time could not, so a trace with such a write fuses even when
    its shapes keep changing."""
    _fresh()
    with torch_tpu.execution_mode("defer_and_fuse"):
        for n in (4, 5):  # the same structure at two sizes: shape-volatile
            t = torch.arange(float(n), device="tpu")
            a = torch.ones(n, device="tpu")
            torch.tpu.synchronize()
            a.copy_(a + t.index_select(0, torch.tensor([0, 1], device="tpu")).sum())
            assert a.cpu().tolist() == [2.0] * n
        t = torch.arange(6.0, device="tpu")
        a = torch.ones(6, device="tpu")
        torch.tpu.synchronize()
        b0 = _by_node()
        a.copy_(a + t.index_select(0, torch.tensor([0, 9], device="tpu")).sum())
        with pytest.raises(IndexError, match="index out of range"):
            torch.tpu.synchronize()
        assert _by_node() == b0
        assert a.cpu().tolist() == [1.0] * 6


def test_a_float_copy_seen_with_other_sizes_is_no_evidence_of_volatility():
    """Only integer/bool nodes seen with other sizes make a new trace run node by node
    at its first sighting (token bookkeeping); a float copy_ of another size is
    everyday code, and its new trace fuses as always."""
    _fresh()
    with torch_tpu.execution_mode("defer_and_fuse"):
        for n in (3, 4):
            d = torch.zeros(n, device="tpu")
            d.copy_(torch.ones(n, device="tpu") * 2)
            d.cpu()
        b0, f0 = _by_node(), torch_tpu._C._deferred_stats()["fused_cache_misses"]
        e = torch.zeros(7, device="tpu")
        e.copy_(torch.ones(7, device="tpu") * 2)
        got = (e + 1).cpu()
    assert got.tolist() == [3.0] * 7
    assert _by_node() == b0
    assert torch_tpu._C._deferred_stats()["fused_cache_misses"] == f0 + 1

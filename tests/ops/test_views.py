"""View, in-place and aliasing semantics against CPU."""
import pytest
import torch

from conftest import assert_close_cpu


def pair(t):
    return t.clone(), t.to("tpu")


def assert_same(tpu, cpu):
    assert_close_cpu(tpu, cpu, rtol=0, atol=0)


def test_view_of_view_inplace():
    c, t = pair(torch.arange(24.0).reshape(4, 6))
    for x in (c, t):
        v = x[1:3]
        vv = v[:, ::2]
        vvv = vv.t()[1:]
        vvv.mul_(10)
        vv.add_(1)
    assert_same(t, c)
    assert t[1:3][:, ::2]._base is t


def test_inplace_through_view_seen_by_base_and_siblings():
    c, t = pair(torch.arange(20.0).reshape(4, 5))
    views = {}
    for name, x in (("c", c), ("t", t)):
        col = x[:, 1]
        row = x[1]
        diag = x.diagonal()
        flat = x.view(-1)
        col.add_(100)          # writes through a strided view
        views[name] = (row, diag, flat, col)
    for a, b in zip(views["t"], views["c"]):
        assert_same(a, b)
    assert_same(t, c)
    # A sibling view written afterwards also updates the others.
    views["t"][0].fill_(-1)
    views["c"][0].fill_(-1)
    assert_same(views["t"][3], views["c"][3])
    assert_same(t, c)


def test_out_into_slice():
    a = torch.randn(3, 4)
    b = torch.randn(3, 4)
    c_base = torch.zeros(5, 4)
    t_base = c_base.to("tpu")
    torch.add(a, b, alpha=2, out=c_base[1:4])
    torch.add(a.to("tpu"), b.to("tpu"), alpha=2, out=t_base[1:4])
    assert_close_cpu(t_base, c_base)
    # Non-contiguous out= slice (a column).
    torch.mul(a[:, 0], b[:, 1], out=c_base[:3, 2])
    torch.mul(a[:, 0].to("tpu"), b[:, 1].to("tpu"), out=t_base[:3, 2])
    assert_close_cpu(t_base, c_base)
    # out= whose shape differs is resized, as on CPU.
    co, to = torch.empty(0), torch.empty(0, device="tpu")
    torch.sum(a, 0, out=co)
    torch.sum(a.to("tpu"), 0, out=to)
    assert_close_cpu(to, co)
    # out= of a matmul into a transposed slice.
    cm, tm = torch.zeros(4, 3), torch.zeros(4, 3, device="tpu")
    torch.mm(a, b.t(), out=cm.t())
    torch.mm(a.to("tpu"), b.t().to("tpu"), out=tm.t())
    assert_close_cpu(tm, cm)


def test_inplace_ops_on_views_and_aliases():
    c, t = pair(torch.arange(12.0).reshape(3, 4))
    for x in (c, t):
        x[0] += 5
        x[:, -1] *= 2
        x.t()[1].sub_(x[2, :3])  # reads and writes the same storage
        x[1:, 1:].clamp_(max=15)
        x.unsqueeze(0)[0, 2].zero_()
    assert_same(t, c)


def test_setitem_and_index_assignment():
    c, t = pair(torch.zeros(4, 5))
    for x in (c, t):
        x[1] = 3.0
        x[:, 2] = torch.arange(4.0, device=x.device)
        x[2:, 3:] = 7
    assert_same(t, c)


def test_data_ptr_arithmetic():
    x = torch.arange(10.0, device="tpu")
    assert x[1:].data_ptr() == x.data_ptr() + x.element_size()
    assert x[3:].data_ptr() == x.data_ptr() + 3 * x.element_size()
    m = torch.zeros(4, 6, dtype=torch.float64, device="tpu")
    assert m[2].data_ptr() == m.data_ptr() + 2 * 6 * 8
    assert m.t().data_ptr() == m.data_ptr()
    y = torch.zeros(10, device="tpu")
    assert y.data_ptr() != x.data_ptr()
    assert x.untyped_storage().data_ptr() == x.data_ptr()


def test_view_metadata_matches_cpu():
    c, t = pair(torch.arange(24.0).reshape(2, 3, 4))
    for f in (lambda x: x.permute(2, 0, 1), lambda x: x.transpose(0, 2), lambda x: x[:, 1],
              lambda x: x.narrow(2, 1, 2), lambda x: x.unsqueeze(1), lambda x: x.view(6, 4),
              lambda x: x.expand(3, 2, 3, 4), lambda x: x.unfold(2, 2, 1),
              lambda x: x.select(1, 2), lambda x: x[..., None, ::2]):
        cv, tv = f(c), f(t)
        assert tv.shape == cv.shape and tv.stride() == cv.stride()
        assert tv.storage_offset() == cv.storage_offset()
        assert tv.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        assert_same(tv, cv)
        assert_same(tv.contiguous(), cv.contiguous())
    assert_same(t.permute(1, 0, 2).reshape(3, 8), c.permute(1, 0, 2).reshape(3, 8))


def test_as_strided():
    c, t = pair(torch.arange(16.0))
    for size, stride, offset in (((2, 2), (1, 2), 1), ((3, 3), (4, 1), 2), ((4,), (0,), 5),
                                 ((2, 3), (3, 2), 0)):
        assert_same(t.as_strided(size, stride, offset), c.as_strided(size, stride, offset))
    t.as_strided((2, 2), (4, 1), 5).fill_(-1.0)
    c.as_strided((2, 2), (4, 1), 5).fill_(-1.0)
    assert_same(t, c)


def test_set_():
    x = torch.arange(6.0, device="tpu")
    y = torch.empty(0, device="tpu")
    y.set_(x)
    assert y.data_ptr() == x.data_ptr() and y.shape == x.shape
    x.add_(1)
    assert torch.equal(y.cpu(), torch.arange(6.0) + 1)
    z = torch.empty(0, device="tpu")
    z.set_(x.untyped_storage(), 2, (2, 2), (1, 2))
    assert torch.equal(z.cpu(), (torch.arange(6.0) + 1).as_strided((2, 2), (1, 2), 2))
    z.mul_(0)
    assert torch.equal(x.cpu(), torch.tensor([1.0, 2.0, 0.0, 0.0, 0.0, 0.0]))
    w = torch.empty(0, device="tpu")
    w.set_(x.untyped_storage())
    assert w.shape == (6,)
    e = torch.ones(3, device="tpu").set_()
    assert e.numel() == 0


def test_resize_():
    x = torch.arange(4.0, device="tpu")
    ptr = x.data_ptr()
    x.resize_(2, 4)                       # growing keeps the content
    assert x.shape == (2, 4)
    assert torch.equal(x.view(-1)[:4].cpu(), torch.arange(4.0))
    x.view(-1)[4:] = 9.0
    assert torch.equal(x.cpu(), torch.tensor([[0.0, 1, 2, 3], [9, 9, 9, 9]]))
    x.resize_(3)                          # shrinking keeps the storage
    assert torch.equal(x.cpu(), torch.arange(3.0))
    assert x.data_ptr() != 0 and isinstance(ptr, int)
    e = torch.empty(0, dtype=torch.int64, device="tpu")
    e.resize_(5).fill_(2)
    assert torch.equal(e.cpu(), torch.full((5,), 2))


def test_detach_and_alias_share_storage():
    t = torch.arange(5.0, device="tpu")
    d = t.detach()
    d[0] = 42
    assert t[0].item() == 42
    v = t.view_as(t)
    v.add_(1)
    assert torch.equal(t.cpu(), d.cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_inplace_dtype_semantics(dtype):
    c, t = pair(torch.arange(6).reshape(2, 3).to(dtype))
    for x in (c, t):
        x.mul_(3)
        x[0].add_(x[1])
    assert_same(t, c)
    with pytest.raises(RuntimeError):
        torch.arange(3, device="tpu").add_(0.5 * torch.ones(3, device="tpu"))


def test_boolean_mask_and_cpu_index():
    c, t = pair(torch.arange(12.0).reshape(3, 4))
    assert_same(t[t > 4], c[c > 4])
    assert_same(t[torch.tensor([True, False, True])], c[torch.tensor([True, False, True])])
    assert_same(t[torch.tensor([2, 0])], c[torch.tensor([2, 0])])   # CPU index tensor
    for x in (c, t):
        x[x > 8] = -1.0
        x[torch.tensor([0, 2], device=x.device), 1] += 10
    assert_same(t, c)


def test_strided_views_with_offsets_inside_a_row():
    """Views whose offset starts inside a row of their layout (a split's later parts,
    narrow along an inner dim, a transposed part): every element read is the CPU's."""
    base = torch.arange(2 * 3 * 12 * 4, dtype=torch.float32)
    c, t = pair(base)
    cases = [((2, 3, 4, 4), (144, 48, 4, 1), 16), ((2, 3, 4, 4), (144, 48, 4, 1), 32),
             ((2, 4, 3, 4), (144, 4, 48, 1), 16),  # a split part, heads moved forward
             ((2, 3, 4, 2), (144, 48, 4, 1), 18),  # inside a row of the innermost dim too
             ((2, 2, 5, 4), (144, 48, 4, 1), 34),  # overruns its row: the window path
             ((3, 5), (48, 4), 11), ((6,), (48,), 47), ((2, 2), (1, 144), 141)]
    for size, stride, offset in cases:
        assert_same(t.as_strided(size, stride, offset), c.as_strided(size, stride, offset))
        assert_same(t.as_strided(size, stride, offset) * 2, c.as_strided(size, stride, offset) * 2)


def test_split_parts_read_without_padding_the_base(tmp_path):
    """q, k and v of a fused projection are slices of the reshaped base, not a pad of
    the whole base (a copy per part) to keep an unaligned flat window in range."""
    import torch_tpu
    c = torch.randn(2, 5, 3 * 8)
    t = c.to("tpu")
    torch_tpu.debug.set_dump_dir(tmp_path)
    try:
        parts = [p.view(2, 5, 2, 4).transpose(1, 2) + 1 for p in t.split(8, dim=2)]
        got = [p.cpu() for p in parts]
    finally:
        torch_tpu.debug.set_dump_dir(None)
    for g, p in zip(got, c.split(8, dim=2)):
        assert torch.equal(g, p.view(2, 5, 2, 4).transpose(1, 2) + 1)
    programs = [f.read_text() for f in tmp_path.glob("*.mlir")]
    assert programs and not any('"stablehlo.pad"' in p for p in programs)


def test_writes_into_permuted_dense_views_without_scatter(tmp_path):
    """A write into a dense view in another dimension order (what `.to(dtype)` or
    `clone()` of a transposed tensor allocates, a transposed block of a larger buffer)
    is a transpose to memory order and a whole or contiguous-range write, not a scatter
    of every element through 64-bit indices (which XLA's CPU backend runs element by
    element: torchao's int8 weight-only linear converted its transposed weight so)."""
    import torch_tpu
    src = torch.randn(6, 4)
    t = src.to("tpu")
    torch_tpu.debug.set_dump_dir(tmp_path)
    try:
        got = {
            "to dtype of a transpose": t.t().to(torch.bfloat16),
            "clone of a transpose": t.t().clone() * 2,
            "channels last": t.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last) + 1,
        }
        buf = torch.zeros(3, 4, 6, device="tpu")
        buf[1].t().copy_(t)  # a transposed block inside a larger buffer: offset 24
        got["transposed block"] = buf
        got = {k: v.cpu() for k, v in got.items()}
    finally:
        torch_tpu.debug.set_dump_dir(None)
    want = {
        "to dtype of a transpose": src.t().to(torch.bfloat16),
        "clone of a transpose": src.t().clone() * 2,
        "channels last": src.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last) + 1,
    }
    ref = torch.zeros(3, 4, 6)
    ref[1].t().copy_(src)
    want["transposed block"] = ref
    for k in want:
        assert torch.equal(got[k], want[k]), k
        assert got[k].stride() == want[k].stride(), k
    programs = [f.read_text() for f in tmp_path.glob("*.mlir")]
    assert programs and not any('"stablehlo.scatter"' in p for p in programs)

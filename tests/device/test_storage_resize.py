"""UntypedStorage.resize_ on tpu storages, as FSDP2 uses it: grow, shrink, free with
resize_(0) and bring back, while views keep sharing the storage."""
import gc

import pytest
import torch

MODES = pytest.mark.parametrize("tpu_execution_mode", ["strict_eager", "defer_and_fuse"],
                                indirect=True, ids=["eager", "fused"])


def _bytes(storage):
    """A storage's bytes on the CPU (read through a uint8 tensor over it)."""
    t = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
    return t.cpu()


@MODES
def test_grow_keeps_contents_and_zero_fills(tpu_execution_mode):
    x = torch.arange(10, dtype=torch.float32, device="tpu") * 2
    s = x.untyped_storage()
    s.resize_(80)
    assert s.nbytes() == 80 and x.untyped_storage().nbytes() == 80
    torch.testing.assert_close(x.cpu(), torch.arange(10, dtype=torch.float32) * 2)
    whole = torch.empty(0, device="tpu").set_(s)
    assert whole.shape == (20,)
    torch.testing.assert_close(whole.cpu()[10:], torch.zeros(10))
    torch.testing.assert_close(whole.cpu()[:10], torch.arange(10, dtype=torch.float32) * 2)


@MODES
def test_shrink_keeps_prefix(tpu_execution_mode):
    x = torch.arange(10, dtype=torch.float32, device="tpu")
    s = x.untyped_storage()
    s.resize_(20)
    assert s.nbytes() == 20
    torch.testing.assert_close(torch.empty(0, device="tpu").set_(s).cpu(),
                               torch.arange(5, dtype=torch.float32))


def test_resize_to_partial_element_keeps_bytes():
    ref = torch.arange(10, dtype=torch.float32)
    x = ref.to("tpu")
    x.untyped_storage().resize_(13)
    expect = ref.clone()
    expect.untyped_storage().resize_(13)
    assert torch.equal(_bytes(x.untyped_storage()), _bytes(expect.untyped_storage()))


@MODES
def test_free_and_reallocate_with_views(tpu_execution_mode):
    """FSDP2's pattern: the parameter and its views survive resize_(0) / resize_(n) + copy_."""
    gc.collect()
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    p = torch.randn(64, 32, device="tpu")
    view = p[8:16]
    flat = p.view(-1)
    assert torch.tpu.memory_allocated() == base + 64 * 32 * 4
    storage = p.untyped_storage()
    storage.resize_(0)
    assert p.untyped_storage().nbytes() == 0 and view.untyped_storage().nbytes() == 0
    assert torch.tpu.memory_allocated() == base, "resize_(0) must free the device memory"
    storage.resize_(64 * 32 * 4)
    assert view.untyped_storage().data_ptr() == p.untyped_storage().data_ptr()
    src = torch.randn(64, 32)
    p.copy_(src.to("tpu"))
    torch.testing.assert_close(p.cpu(), src)
    torch.testing.assert_close(view.cpu(), src[8:16])
    torch.testing.assert_close(flat.cpu(), src.view(-1))
    view.mul_(2)  # a write through the view reaches the parameter
    torch.testing.assert_close(p.cpu()[8:16], src[8:16] * 2)
    del p, view, flat, storage, src
    gc.collect()
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == base


def test_pending_work_sees_the_old_contents():
    """Defer & Fuse: work recorded before the resize reads the storage as it was."""
    import torch_tpu
    with torch_tpu.execution_mode("defer_and_fuse"):
        x = torch.arange(8, dtype=torch.float32, device="tpu")
        y = x * 3                         # recorded, not run
        x.add_(1)                         # x is pending too
        x.untyped_storage().resize_(16)   # runs the pending work first
        torch.testing.assert_close(y.cpu(), torch.arange(8, dtype=torch.float32) * 3)
        torch.testing.assert_close(torch.empty(0, device="tpu").set_(x.untyped_storage()).cpu(),
                                   torch.arange(4, dtype=torch.float32) + 1)


def test_resize_back_and_forth_keeps_accounting():
    gc.collect()
    torch.tpu.synchronize()
    base = torch.tpu.memory_allocated()
    x = torch.ones(256, device="tpu")
    s = x.untyped_storage()
    for n in (2048, 512, 0, 1024, 0, 4096):
        s.resize_(n)
        assert s.nbytes() == n
        assert torch.tpu.memory_allocated() - base in (0, n)  # a fresh region holds no buffer yet
    s.resize_(0)
    assert torch.tpu.memory_allocated() == base
    del x, s
    gc.collect()
    assert torch.tpu.memory_allocated() == base


def test_negative_size_is_an_error():
    s = torch.ones(4, device="tpu").untyped_storage()
    with pytest.raises(RuntimeError):
        s.resize_(-1)

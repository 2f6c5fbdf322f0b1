"""torch.unique without a dim (_unique2, csrc/aten/unique_kernels.cc) against PyTorch CPU, in
both execution modes, with nothing falling back to the CPU."""
import pytest
import torch

import torch_tpu
from lower_check import check


@pytest.mark.parametrize("kw", [{}, {"return_inverse": True}, {"return_counts": True},
                                {"return_inverse": True, "return_counts": True}])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float32, torch.bool])
def test_unique_sorted(kw, dtype):
    x = torch.tensor([[3, 1, 2, 2, 7], [0, 3, 1, 3, 3]]).to(dtype)
    check(lambda a: torch.unique(a, sorted=True, **kw), x, grad=False)


def test_unique_unsorted_gives_the_same_set():
    """Unsorted order is unspecified (the CPU hashes); tpu returns it sorted, as CUDA does."""
    x = torch.randint(0, 20, (200,))
    v, inv, cnt = torch.unique(x.to("tpu"), sorted=False, return_inverse=True, return_counts=True)
    v, inv, cnt = v.cpu(), inv.cpu(), cnt.cpu()
    assert torch.equal(v, torch.unique(x))
    assert torch.equal(v[inv], x)
    assert torch.equal(cnt, torch.unique(x, return_counts=True)[1])
    assert not torch_tpu.debug.metrics()["cpu_fallback_counts"]


def test_unique_float_edge_values_scalar_and_empty():
    x = torch.tensor([2.5, -1.0, float("inf"), -1.0, 0.0, 2.5, -float("inf")])
    check(lambda a: torch.unique(a, return_inverse=True, return_counts=True), x, grad=False)
    check(lambda a: torch.unique(a, return_inverse=True, return_counts=True), torch.tensor(4), grad=False)
    check(lambda a: torch.unique(a, return_inverse=True, return_counts=True), torch.tensor([]),
          grad=False)


def test_vilt_style_patch_selection():
    """ViLT keeps the unique patch indices of a multinomial draw."""
    idx = torch.randint(0, 50, (3, 40))
    check(lambda a: torch.unique(a, return_counts=True), idx, grad=False)


def test_unique_complex_raises():
    with pytest.raises(RuntimeError, match="unique"):
        torch.unique(torch.zeros(3, dtype=torch.complex64, device="tpu"))

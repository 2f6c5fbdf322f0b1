"""torch.set_default_dtype reaches tpu programs: factories and scalar type promotion give
the default dtype as on CPU, even after the same ops ran (and were cached) under another
default. (The program key holds the default dtype.)"""
import pytest
import torch

from conftest import assert_close_cpu

CASES = {
    "ones": lambda d: torch.ones(3, device=d),
    "zeros": lambda d: torch.zeros(2, 2, device=d),
    "full": lambda d: torch.full((3,), 1.25, device=d),
    "arange_float": lambda d: torch.arange(0.0, 1.0, 0.25, device=d),
    "linspace": lambda d: torch.linspace(0, 1, 5, device=d),
    "tensor_scalar": lambda d: torch.tensor(1.0, device=d),
    "tensor_list": lambda d: torch.tensor([1.0, 2.5], device=d),
    "int_times_float": lambda d: torch.arange(4, device=d) * 1.5,
    "int_true_divide": lambda d: torch.arange(4, device=d) / 3,
    "int_plus_float": lambda d: torch.ones(3, dtype=torch.int64, device=d) + 0.5,
    "sqrt_of_int": lambda d: torch.sqrt(torch.arange(4, device=d)),
    "mean_of_float": lambda d: torch.arange(4.0, device=d).mean(),
    "rand_dtype": lambda d: torch.rand(3, device=d).dtype,
}


@pytest.fixture
def restore_default_dtype():
    old = torch.get_default_dtype()
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_float64_after_float32(name, restore_default_dtype):
    fn = CASES[name]
    torch.set_default_dtype(torch.float32)
    first = fn("tpu")  # compiles (and caches) the program under float32
    if isinstance(first, torch.Tensor):
        assert first.dtype == fn("cpu").dtype == torch.float32
        first.cpu()
    torch.set_default_dtype(torch.float64)
    got, ref = fn("tpu"), fn("cpu")
    if isinstance(ref, torch.dtype):
        assert got == ref == torch.float64
        return
    assert ref.dtype == torch.float64
    assert_close_cpu(got, ref)
    torch.set_default_dtype(torch.float32)
    again = fn("tpu")
    assert again.dtype == torch.float32
    assert_close_cpu(again, fn("cpu"))

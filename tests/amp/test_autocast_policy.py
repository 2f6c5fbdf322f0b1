"""torch.autocast("tpu") applies CUDA's cast policy.

The expectations come from PyTorch itself, not from a copy kept here: the set
of ops with an autocast kernel is compared with the set PyTorch registers for
CUDA's autocast key, and the output dtypes are checked with PyTorch's own test
data (torch.testing._internal.autocast_test_lists, the per-op lists test_cuda.py
runs) through PyTorch's own checker, which also compares every result bitwise
with the same op run on inputs cast by hand.
"""
import pytest
import torch
from torch.testing._internal.autocast_test_lists import AutocastTestLists, TestAutocast

# CUDA registers these cuDNN kernels too; no tpu tensor can reach them.
CUDA_ONLY = {"aten::cudnn_convolution", "aten::cudnn_convolution_transpose"}

LOWER = (torch.bfloat16, torch.float16)


def _ops_with_kernel(key):
    return {n for n in torch._C._dispatch_get_all_op_names()
            if torch._C._dispatch_has_kernel_for_dispatch_key(n, key)}


def test_registered_ops_are_cudas():
    cuda = _ops_with_kernel("AutocastCUDA")
    tpu = _ops_with_kernel("AutocastPrivateUse1")
    assert len(cuda) > 100  # PyTorch's registration is there to compare with
    assert tpu == cuda - CUDA_ONLY, (sorted(cuda - CUDA_ONLY - tpu), sorted(tpu - cuda))


def test_other_ops_fall_through():
    # embedding is outside the policy: it runs untouched in its input's dtype.
    w = torch.randn(10, 4, device="tpu")
    with torch.autocast("tpu"):
        out = torch.nn.functional.embedding(torch.tensor([1, 2], device="tpu"), w)
        h = out.to(torch.bfloat16) * 2  # mul is not in the policy: no cast back
    assert out.dtype == torch.float32
    assert h.dtype == torch.bfloat16


# One checker for all entries: PyTorch's TestAutocast helper (a TestCase; any
# method name makes an instance).
_checker = TestAutocast("_run_autocast_outofplace")


@pytest.fixture(scope="module")
def lists():
    torch.manual_seed(0)
    return AutocastTestLists(torch.device("tpu"))


def _lower(value, dtype):
    """The lists spell the lower-precision type float16 (CUDA's default); for a
    bfloat16 run their float16 tensors become bfloat16."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.dtype == torch.float16 else value
    if isinstance(value, (tuple, list)):
        return type(value)(_lower(v, dtype) for v in value)
    return value


def _entries(name):
    # Only the number of entries matters at collection (the data is made on tpu later).
    return range(len(getattr(AutocastTestLists(torch.device("cpu")), name)))


def _split(entry):
    op, args = entry[0], entry[1]
    kwargs = entry[2] if len(entry) > 2 and isinstance(entry[2], dict) else {}
    return op, args, kwargs


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("torch_fp16"))
def test_lower_precision_ops(lists, i, dtype):
    entry = lists.torch_fp16[i]
    op, args = entry[0], entry[1]
    if op in ("cudnn_convolution", "cudnn_convolution_transpose"):
        pytest.skip("cuDNN-only kernel (CUDA_ONLY above)")
    if len(entry) == 3 and entry[2]:
        # test_cuda.py reads a third element as a skip flag; einsum's entry has
        # one (its arguments do not fit its equation) and is checked below instead.
        pytest.skip("skipped by PyTorch's own CUDA test")
    _checker._run_autocast_outofplace(op, _lower(args, dtype), dtype, "tpu", amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("torch_fp32"))
def test_fp32_ops(lists, i, dtype):
    op, args, kwargs = _split(lists.torch_fp32[i])
    _checker._run_autocast_outofplace(op, _lower(args, dtype), torch.float32, "tpu",
                                      add_kwargs=kwargs, amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("torch_need_autocast_promote"))
def test_promote_ops(lists, i, dtype):
    op, args, _ = _split(lists.torch_need_autocast_promote[i])
    _checker._run_autocast_outofplace(op, _lower(args, dtype), torch.float32, "tpu",
                                      amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("torch_expect_builtin_promote"))
def test_builtin_promote_ops(lists, i, dtype):
    op, args, out_type = lists.torch_expect_builtin_promote[i]
    _checker._run_autocast_outofplace(op, _lower(args, dtype), torch.float32, "tpu",
                                      out_type=out_type, amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("methods_expect_builtin_promote"))
def test_builtin_promote_methods(lists, i, dtype):
    op, args, out_type = lists.methods_expect_builtin_promote[i]
    _checker._run_autocast_outofplace(op, _lower(args, dtype), torch.float32, "tpu",
                                      module=None, out_type=out_type, amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("nn_fp16"))
def test_nn_lower_precision_ops(lists, i, dtype):
    op, args, _ = _split(lists.nn_fp16[i])
    _checker._run_autocast_outofplace(op, _lower(args, dtype), dtype, "tpu",
                                      module=torch._C._nn, amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("nn_fp32"))
def test_nn_fp32_ops(lists, i, dtype):
    op, args, _ = _split(lists.nn_fp32[i])
    _checker._run_autocast_outofplace(op, _lower(args, dtype), torch.float32, "tpu",
                                      module=torch._C._nn, amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
@pytest.mark.parametrize("i", _entries("linalg_fp16"))
def test_linalg_lower_precision_ops(lists, i, dtype):
    op, args, _ = _split(lists.linalg_fp16[i])
    _checker._run_autocast_outofplace(op, _lower(args, dtype), dtype, "tpu",
                                      module=torch._C._linalg, amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
def test_methods(lists, dtype):
    for op, args in lists.methods_fp16:
        _checker._run_autocast_outofplace(op, _lower(args, dtype), dtype, "tpu", module=None,
                                          amp_dtype=dtype)
    for op, args in lists.methods_fp32:
        _checker._run_autocast_outofplace(op, _lower(args, dtype), torch.float32, "tpu",
                                          module=None, amp_dtype=dtype)


@pytest.mark.parametrize("dtype", LOWER, ids=["bf16", "fp16"])
def test_banned(lists, dtype):
    with torch.autocast("tpu", dtype=dtype):
        for op, args, module in lists.banned:
            with pytest.raises(RuntimeError, match="unsafe to autocast"):
                getattr(module, op)(*args)


def test_ops_outside_the_test_lists():
    # Policy entries that PyTorch's test lists leave out, checked against CPU
    # autocast where both devices share the entry (upsample and sdpa are in the
    # same macro lists for every device).
    x = torch.randn(2, 3, 4, 4)
    q = torch.randn(1, 2, 4, 8)
    cases = [
        (lambda t: torch.nn.functional.interpolate(t, scale_factor=2, mode="nearest"), (x,)),
        (lambda t: torch.nn.functional.interpolate(t, scale_factor=2, mode="bilinear"), (x,)),
        (lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(a, b, c), (q, q, q)),
        (lambda a, b: torch.einsum("bkhd,bqhd->bqkh", a, b), (q, q)),
    ]
    for fn, args in cases:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ref = fn(*args)
        with torch.autocast("tpu", dtype=torch.bfloat16):
            got = fn(*[a.to("tpu") for a in args])
        assert got.dtype == ref.dtype

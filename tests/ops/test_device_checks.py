"""Device-side checks: runtime indices out of range and integer division by zero raise
what PyTorch's CPU backend raises (XLA itself would clamp the index and return numbers),
at the next point where the host waits; tensors the failed program would have written
keep their contents; the device keeps working. Runs in Strict Eager and Defer & Fuse
(conftest), plus torch.compile(backend="tpu") below."""
import pytest
import torch
import torch.nn.functional as F

from conftest import assert_close_cpu, run_python

X = torch.arange(12.0).reshape(3, 4)



# name -> (function of (x, index), exception type, a piece of the message)
CASES = {
    "embedding": (lambda x, j: F.embedding(j, x), IndexError, "index out of range in self"),
    "index_select": (lambda x, j: x.index_select(0, j), IndexError, "index out of range in self"),
    "gather": (lambda x, j: x.gather(0, j.view(-1, 1)), RuntimeError, "out of bounds for dimension 0 with size 3"),
    "scatter": (lambda x, j: x.clone().scatter_(0, j.view(-1, 1), 1.0), RuntimeError, "with size 3"),
    "scatter_src": (lambda x, j: x.clone().scatter_(0, j.view(-1, 1), torch.ones(2, 1, device=x.device)),
                    RuntimeError, "with size 3"),
    "scatter_add": (lambda x, j: x.clone().scatter_add_(0, j.view(-1, 1), torch.ones(2, 1, device=x.device)),
                    RuntimeError, "with size 3"),
    "scatter_reduce": (lambda x, j: x.clone().scatter_reduce_(0, j.view(-1, 1), torch.ones(2, 1, device=x.device),
                                                              "amax"), RuntimeError, "with size 3"),
    "index": (lambda x, j: x[j], IndexError, "out of bounds for dimension 0 with size 3"),
    "index_put": (lambda x, j: x.clone().index_put_((j,), torch.tensor(1.0, device=x.device)), IndexError,
                  "with size 3"),
    "index_put_acc": (lambda x, j: x.clone().index_put_((j,), torch.tensor(1.0, device=x.device), True),
                      IndexError, "with size 3"),
    "index_add": (lambda x, j: x.clone().index_add_(0, j, torch.ones(2, 4, device=x.device)), RuntimeError,
                  "with size 3"),
    "cross_entropy": (lambda x, j: F.cross_entropy(x[:2, :3], j), IndexError, "Target"),
    "nll_loss": (lambda x, j: F.nll_loss(x[:2, :3], j), IndexError, "Target"),
    "embedding_bag": (lambda x, j: F.embedding_bag(j, x, torch.tensor([0], device=x.device)), RuntimeError,
                      "valid range"),
    "one_hot": (lambda x, j: F.one_hot(j, 3), RuntimeError, ""),
    "take": (lambda x, j: x.take(j), IndexError, "tried to access index"),
    "put": (lambda x, j: x.clone().put_(j, torch.ones(2, device=x.device)), IndexError,
            "tried to access index"),
    "put_acc": (lambda x, j: x.clone().put_(j, torch.ones(2, device=x.device), accumulate=True),
                IndexError, "tried to access index"),
}
# take/put index the flat tensor (12 elements), negatives from the end.
FLAT_BAD = {"positive": [0, 12], "negative": [1, -13]}
BAD = {"positive": [0, 5], "negative": [1, -7]}


@pytest.mark.parametrize("sign", sorted(BAD))
@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_raises_like_cpu(name, sign):
    fn, exc, text = CASES[name]
    j = torch.tensor(BAD[sign])
    if name == "index" or name.startswith("index_put"):
        j = torch.tensor([0, 5] if sign == "positive" else [1, -4])
    if name in ("take", "put", "put_acc"):
        j = torch.tensor(FLAT_BAD[sign])
    with pytest.raises(exc):
        fn(X.clone(), j)  # the CPU reference raises the same type
    with pytest.raises(exc, match=text):
        fn(X.to("tpu"), j.to("tpu")).cpu()
    # The device keeps working, and in-range indices give CPU's answer.
    good = torch.tensor([0, 2])
    assert_close_cpu(fn(X.to("tpu"), good.to("tpu")), fn(X.clone(), good))


@pytest.mark.parametrize("op", ["floor_divide", "remainder", "fmod", "div_trunc", "div_floor"])
def test_integer_division_by_zero(op):
    f = {"floor_divide": lambda a, b: a // b, "remainder": lambda a, b: a % b,
         "fmod": torch.fmod, "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
         "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor")}[op]
    a, b = torch.tensor([7, -7, 3]), torch.tensor([2, 0, 1])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a, b)
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(a.to("tpu"), b.to("tpu")).cpu()
    # float division by zero is no error (inf), and non-zero integer divisors work
    assert_close_cpu(f(a.float().to("tpu"), b.float().to("tpu")), f(a.float(), b.float()), equal_nan=True)
    assert_close_cpu(f(a.to("tpu"), b.to("tpu") + 1), f(a, b + 1))


def test_failed_program_leaves_written_tensors_unchanged():
    x = X.to("tpu")
    y = x.clone()
    y.index_put_((torch.tensor([0, 9], device="tpu"),), torch.tensor(7.0, device="tpu"))
    z = x.clone()
    z.scatter_add_(0, torch.tensor([[3]], device="tpu"), torch.ones(1, 1, device="tpu"))
    with pytest.raises(IndexError):
        y.cpu()
    assert torch.equal(y.cpu(), X)  # reported once; contents as before the failed op
    assert torch.equal(z.cpu(), X)
    assert (x + 1).sum().item() == 78.0


@pytest.mark.parametrize("op", ["put_", "put_acc", "index_put_", "scatter_", "index_add_"])
@pytest.mark.parametrize("sign", sorted(BAD))
def test_in_place_write_past_bounds_leaves_tensor_unchanged(op, sign):
    x = X.to("tpu")
    y = x.clone()
    ones = torch.ones(2, device="tpu")
    flat = torch.tensor(FLAT_BAD[sign], device="tpu")
    rows = torch.tensor([0, 5] if sign == "positive" else [1, -4], device="tpu")
    write = {
        "put_": lambda: y.put_(flat, ones),
        "put_acc": lambda: y.put_(flat, ones, accumulate=True),
        "index_put_": lambda: y.index_put_((rows,), torch.tensor(7.0, device="tpu")),
        "scatter_": lambda: y.scatter_(0, rows.view(-1, 1), 1.0),
        "index_add_": lambda: y.index_add_(0, rows, torch.ones(2, 4, device="tpu")),
    }[op]
    write()
    with pytest.raises((IndexError, RuntimeError)):
        y.cpu()
    assert torch.equal(y.cpu(), X)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
def test_take_put_values(dtype):
    x = torch.arange(12, dtype=dtype).reshape(3, 4)
    j = torch.tensor([[0, -1], [5, 11]])
    assert_close_cpu(x.to("tpu").take(j.to("tpu")), x.take(j))
    src = torch.tensor([9, 8, 7, 6], dtype=dtype)
    for acc in (False, True):
        k = torch.tensor([3, -12, 7, 3]) if acc else torch.tensor([3, -12, 7, 10])
        assert_close_cpu(x.to("tpu").put_(k.to("tpu"), src.to("tpu"), accumulate=acc),
                         x.clone().put_(k, src, accumulate=acc))
    assert_close_cpu(x.t().to("tpu").take(j.to("tpu")), x.t().take(j))  # a non-contiguous self
    assert_close_cpu(torch.put(x.to("tpu"), k.to("tpu"), src.to("tpu")), torch.put(x, k, src))


def test_take_put_grad():
    x = torch.randn(3, 4, requires_grad=True)
    xt = x.detach().to("tpu").requires_grad_()
    j = torch.tensor([1, 1, -1, 6])
    x.take(j).pow(2).sum().backward()
    xt.take(j.to("tpu")).pow(2).sum().backward()
    assert_close_cpu(xt.grad, x.grad)


@pytest.mark.parametrize("weights", [None, torch.float32, torch.int64])
def test_bincount_values(weights):
    j = torch.tensor([1, 4, 1, 0, 7])
    w = None if weights is None else torch.tensor([2, 1, 3, 5, 1], dtype=weights)
    for minlength in (0, 3, 12):
        ref = torch.bincount(j, w, minlength=minlength)
        got = torch.bincount(j.to("tpu"), None if w is None else w.to("tpu"), minlength=minlength)
        assert got.dtype == ref.dtype
        assert_close_cpu(got, ref)
    empty = torch.tensor([], dtype=torch.int64)
    assert_close_cpu(torch.bincount(empty.to("tpu"), minlength=4), torch.bincount(empty, minlength=4))


def test_bincount_refuses_negative_and_bad_args():
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1]))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1], device="tpu"))
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([[1]], device="tpu"))
    with pytest.raises(RuntimeError, match="same length"):
        torch.bincount(torch.tensor([1, 2], device="tpu"), torch.ones(3, device="tpu"))
    assert torch.bincount(torch.tensor([2], device="tpu")).tolist() == [0, 0, 1]  # still usable


@pytest.mark.parametrize("index", [[0, 3], [0, -1]])
def test_embedding_dense_backward_checks_index(index):
    g = torch.ones(2, 4, device="tpu")
    with pytest.raises(IndexError, match="index out of range"):
        torch.ops.aten.embedding_dense_backward(g, torch.tensor(index, device="tpu"), 3, -1, False).cpu()
    good = torch.tensor([0, 2])
    assert_close_cpu(torch.ops.aten.embedding_dense_backward(g, good.to("tpu"), 3, -1, False),
                     torch.ops.aten.embedding_dense_backward(g.cpu(), good, 3, -1, False))


def test_reported_at_synchronize_and_item():
    t = torch.zeros(4, device="tpu")
    bad = t.index_select(0, torch.tensor([4], device="tpu"))
    with pytest.raises(IndexError):
        torch.tpu.synchronize()
    bad = t.gather(0, torch.tensor([-1], device="tpu")).sum()
    with pytest.raises(RuntimeError, match="out of bounds"):
        bad.item()
    assert t.add(1).sum().item() == 4.0


def test_many_checked_programs_report_the_failed_one_once():
    """A sync point reads the flags of every checked program launched since the last
    one together (Strict Eager: one program per op); the one bad index among many
    good ones is reported, once, with its op and bound, and later work is unaffected."""
    t = torch.arange(4.0, device="tpu")
    good = [t.index_select(0, torch.tensor([i % 4], device="tpu")) for i in range(6)]
    bad = t.gather(0, torch.tensor([9], device="tpu"))
    more = [t.index_select(0, torch.tensor([3 - i % 4], device="tpu")) for i in range(6)]
    with pytest.raises(RuntimeError, match="index 9 is out of bounds for dimension 0 with size 4"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()  # reported once: nothing is pending any more
    assert [g.item() for g in good] == [float(i % 4) for i in range(6)]
    assert [m.item() for m in more] == [float(3 - i % 4) for i in range(6)]
    del bad


def test_defer_and_fuse_names_python_line(tpu_execution_mode):
    if tpu_execution_mode != "defer_and_fuse":
        return
    x = torch.randn(5, 3, device="tpu")
    y = (x * 2).index_select(0, torch.tensor([1, 8], device="tpu")).relu()  # BAD LINE
    with pytest.raises(IndexError) as info:
        y.cpu()
    msg = str(info.value)
    assert "aten::index_select" in msg and "test_device_checks.py" in msg, msg


@pytest.mark.strict_only
@pytest.mark.parametrize("name", ["embedding", "gather", "index", "index_put", "cross_entropy",
                                  "take", "put", "put_acc"])
@pytest.mark.parametrize("sign", sorted(BAD))
def test_compiled_graph_checks(name, sign):
    fn, exc, text = CASES[name]
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, j: fn(x, j) * 1, backend="tpu")
    good = torch.tensor([0, 2])
    assert_close_cpu(compiled(X.to("tpu"), good.to("tpu")), fn(X.clone(), good) * 1)
    bad = BAD[sign]
    if name == "index" or name.startswith("index_put"):
        bad = [0, 5] if sign == "positive" else [1, -4]
    if name in ("take", "put", "put_acc"):
        bad = FLAT_BAD[sign]
    with pytest.raises(exc, match=text):
        compiled(X.to("tpu"), torch.tensor(bad, device="tpu")).cpu()
    torch._dynamo.reset()


@pytest.mark.strict_only
def test_checks_off_by_env():
    r = run_python("""
        import torch, torch_tpu
        x = torch.arange(6.0, device="tpu")
        print(x.index_select(0, torch.tensor([1, 9], device="tpu")).cpu().tolist())
        print(torch_tpu._C._device_checks_enabled())
    """, env={"TORCH_TPU_CHECKS": "0"})
    assert r.returncode == 0, r.stderr
    assert "False" in r.stdout

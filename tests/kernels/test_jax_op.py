"""torch_tpu.kernels.jax_op: JAX functions as PyTorch ops, their StableHLO inlined
into the program of every execution mode, with a jax.vjp backward."""
import pytest
import torch

import torch_tpu
from conftest import assert_close_cpu, run_python

jax = pytest.importorskip("jax")
jnp = jax.numpy

from torch_tpu.kernels import jax_op  # noqa: E402


@jax_op("jax_test::rms_scale")
def rms_scale(x, w, *, eps: float = 1e-6, power: int = 1):
    """RMSNorm over the last dim times w, raised to `power` (a static int)."""
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w
    return y ** power


@jax_op("jax_test::split_stats", num_outputs=2)
def split_stats(x):
    return jnp.max(x, axis=0), jnp.tanh(x) * 2


@jax_op("jax_test::gather_rows", differentiable=True)
def gather_rows(table, idx):
    return table[idx] * 3


def ref_rms_scale(x, w, eps=1e-6, power=1):
    return (x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w) ** power


def test_registration_and_fake_shapes():
    assert torch.ops.jax_test.rms_scale is rms_scale.op
    assert "eps" in str(rms_scale.op.default._schema)
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        out = rms_scale(torch.empty(2, 5, 8), torch.empty(8))
        m, t = split_stats(torch.empty(3, 4, dtype=torch.float64))
    assert out.shape == (2, 5, 8) and out.dtype == torch.float32
    assert m.shape == (4,) and t.shape == (3, 4) and m.dtype == torch.float64


def test_callable_with_cpu_tensors():
    x, w = torch.randn(3, 8), torch.randn(8)
    torch.testing.assert_close(rms_scale(x, w), ref_rms_scale(x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_matches_cpu(mode):
    x, w = torch.randn(2, 5, 8), torch.randn(8)
    table, idx = torch.randn(6, 4), torch.tensor([5, 0, 2, 2])
    with torch_tpu.execution_mode(mode):
        out = rms_scale(x.to("tpu"), w.to("tpu"), eps=1e-3, power=2)
        m, t = split_stats(x[0].double().to("tpu"))
        g = gather_rows(table.to("tpu"), idx.to("tpu"))
    assert_close_cpu(out, ref_rms_scale(x, w, 1e-3, 2), rtol=1e-4, atol=1e-5)
    assert_close_cpu(m, x[0].double().max(0).values)
    assert_close_cpu(t, torch.tanh(x[0].double()) * 2)
    assert_close_cpu(g, table[idx] * 3)


def test_static_args_are_separate_lowerings():
    x, w = torch.randn(2, 8), torch.randn(8)
    a = rms_scale(x.to("tpu"), w.to("tpu"), power=1)
    b = rms_scale(x.to("tpu"), w.to("tpu"), power=3)
    assert_close_cpu(a, ref_rms_scale(x, w), rtol=1e-4, atol=1e-5)
    assert_close_cpu(b, ref_rms_scale(x, w, power=3), rtol=1e-4, atol=1e-5)


def test_gradcheck_float64():
    x = torch.randn(3, 4, dtype=torch.float64, device="tpu", requires_grad=True)
    w = torch.randn(4, dtype=torch.float64, device="tpu", requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_scale(a, b, eps=1e-3, power=2), (x, w))
    table = torch.randn(5, 3, dtype=torch.float64, device="tpu", requires_grad=True)
    idx = torch.tensor([4, 0, 4], device="tpu")
    assert torch.autograd.gradcheck(lambda t: gather_rows(t, idx), (table,))


def test_backward_matches_cpu():
    x, w = torch.randn(2, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    ref_rms_scale(x, w).square().sum().backward()
    xt = x.detach().to("tpu").requires_grad_()
    wt = w.detach().to("tpu").requires_grad_()
    rms_scale(xt, wt).square().sum().backward()
    assert_close_cpu(xt.grad, x.grad, rtol=1e-4, atol=1e-5)
    assert_close_cpu(wt.grad, w.grad, rtol=1e-4, atol=1e-5)


def test_fused_step_adds_no_launch():
    x, w = torch.randn(4, 8, device="tpu"), torch.randn(8, device="tpu")

    def step(use_kernel):
        a = x + 1
        b = rms_scale(a, w) if use_kernel else a * w
        return (b * 2).sum()

    launches = []
    for use_kernel in (False, True):
        with torch_tpu.execution_mode("defer_and_fuse"):
            step(use_kernel).cpu()  # warm: compile
        before = torch_tpu.debug.metrics()["executions"]
        with torch_tpu.execution_mode("defer_and_fuse"):
            out = step(use_kernel).cpu()
        launches.append(torch_tpu.debug.metrics()["executions"] - before)
    assert launches[1] == launches[0] == 1, launches
    torch.testing.assert_close(out, (ref_rms_scale(x.cpu() + 1, w.cpu()) * 2).sum(),
                               rtol=1e-4, atol=1e-4)


def test_compile_one_graph_no_break():
    from torch._dynamo.utils import counters
    counters.clear()
    torch._dynamo.reset()

    def f(x, w):
        return rms_scale(x.relu(), w, power=2) - 1

    x, w = torch.randn(3, 8), torch.randn(8)
    out = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"), w.to("tpu"))
    assert_close_cpu(out, ref_rms_scale(x.relu(), w, power=2) - 1, rtol=1e-4, atol=1e-5)
    assert sum(counters["graph_break"].values()) == 0
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["tpu", "inductor"])
def test_compiled_graph_adds_no_launch(backend):
    """A compiled graph with the JAX op is one program launch, as without it: the
    kernel is inside the graph's program (backend "inductor": the default
    torch.compile, whose whole-graph pass hands the graph to the same compiler)."""
    torch._dynamo.reset()
    x, w = torch.randn(4, 8), torch.randn(8)

    def plain(x, w):
        return ((x + 1) * w * 2).sum()

    def kernel(x, w):
        return (rms_scale(x + 1, w) * 2).sum()

    launches = []
    for f in (plain, kernel):
        fn = torch.compile(f, backend=backend, fullgraph=True)
        fn(x.to("tpu"), w.to("tpu")).cpu()  # warm: compile
        xt, wt = x.to("tpu"), w.to("tpu")
        torch.tpu.synchronize()
        before = torch_tpu.debug.metrics()["executions"]
        out = fn(xt, wt)
        torch.tpu.synchronize()
        launches.append(torch_tpu.debug.metrics()["executions"] - before)
        out = out.cpu()
    assert launches[1] == launches[0] == 1, launches
    torch.testing.assert_close(out, (ref_rms_scale(x + 1, w) * 2).sum(), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()


def test_second_call_compiles_nothing():
    x, w = torch.randn(7, 8, device="tpu"), torch.randn(8, device="tpu")
    rms_scale(x, w, eps=0.5).cpu()
    x2 = x * 2
    variants = torch_tpu._C._custom_kernel_variants("jax_test::rms_scale")
    before = torch_tpu.debug.metrics()["programs_compiled"]
    rms_scale(x2, w, eps=0.5).cpu()
    assert torch_tpu.debug.metrics()["programs_compiled"] == before
    assert torch_tpu._C._custom_kernel_variants("jax_test::rms_scale") == variants


def test_errors_are_python_exceptions():
    f8 = torch.float8_e4m3fn
    with pytest.raises(TypeError, match="float8_e4m3fn is not supported by jax_op"):
        rms_scale(torch.randn(2, 8).to(f8).to("tpu"), torch.randn(8).to(f8).to("tpu"))
    with pytest.raises(ValueError, match="Incompatible shapes"):  # JAX's own message
        rms_scale(torch.randn(2, 8, device="tpu"), torch.randn(5, device="tpu"))
    with pytest.raises(ValueError, match="returned 2 arrays"):
        @jax_op("jax_test::wrong_count")
        def wrong(x):
            return x, x
        wrong(torch.randn(2, device="tpu"))
    with pytest.raises(TypeError, match="keyword-only"):
        @jax_op("jax_test::tensor_default")
        def bad(x, y=1.0):
            return x


def test_pytrees_are_refused_clearly():
    @jax_op("jax_test::dict_out", num_outputs=2)
    def dict_out(x):
        return {"a": x, "b": x * 2}

    with pytest.raises(TypeError, match="must return an array or a tuple of arrays"):
        dict_out(torch.randn(3, device="tpu"))
    w = torch.randn(8, device="tpu")
    with pytest.raises(TypeError, match="positional argument 0 is a list"):
        rms_scale([torch.randn(2, 8, device="tpu")], w)
    with pytest.raises(TypeError, match="positional argument 1 is a dict"):
        split_stats_nd(torch.randn(2, device="tpu"), {"y": w})


@jax_op("jax_test::split_stats_nd", num_outputs=2, differentiable=False)
def split_stats_nd(x, y):
    return x * 2, y + 1


def test_importing_torch_tpu_does_not_import_jax():
    r = run_python("""
        import sys, torch, torch_tpu, torch_tpu.kernels
        assert "jax" not in sys.modules, "jax imported"
        print("ok")
    """)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_jax_missing_raises_import_error():
    # A finder that refuses `jax` simulates an environment without it.
    r = run_python("""
        import sys
        class NoJax:
            def find_spec(self, name, path=None, target=None):
                if name == "jax" or name.startswith("jax."):
                    raise ImportError("No module named 'jax'")
        sys.meta_path.insert(0, NoJax())
        import torch, torch_tpu
        from torch_tpu.kernels import jax_op
        try:
            jax_op("nojax::f")
        except ImportError as e:
            print("ERR", e)
    """)
    assert r.returncode == 0, r.stderr
    assert "ERR" in r.stdout and "pip install" in r.stdout, r.stdout


def test_pallas_interpret_kernel_matches_cpu():
    """A Pallas kernel in interpret mode lowers to plain StableHLO (a while loop over
    the grid), so it runs inside our programs on the CPU plugin."""
    pl = pytest.importorskip("jax.experimental.pallas")

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = x_ref[...] * 2 + jnp.tanh(y_ref[...])

    @jax_op("jax_test::pallas_axpy")
    def pallas_axpy(x, y):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(2,), in_specs=[pl.BlockSpec((4, 128), lambda i: (i, 0))] * 2,
                              out_specs=pl.BlockSpec((4, 128), lambda i: (i, 0)),
                              interpret=True)(x, y)

    x, y = torch.randn(8, 128), torch.randn(8, 128)
    with torch_tpu.execution_mode("defer_and_fuse"):
        out = pallas_axpy(x.to("tpu"), y.to("tpu")) + 1
    assert_close_cpu(out, x * 2 + torch.tanh(y) + 1)

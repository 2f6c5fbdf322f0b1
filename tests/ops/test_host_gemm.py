"""The CPU plugin's float32 products as custom calls into PyTorch's CPU GEMM
(TORCH_TPU_CPU_HOST_GEMM=1; csrc/engine/host_gemm.h, csrc/hlo/host_gemm.h): every form
against PyTorch's CPU results in Strict Eager, Defer & Fuse and compiled, and which
products take the call. The setting is read when the plugin starts, so each test runs
in a child process."""
import pytest

import torch_tpu
from conftest import run_python

pytestmark = [pytest.mark.skipif(torch_tpu._C._platform() != "cpu",
                                 reason="the host GEMM is the CPU plugin's"),
              pytest.mark.strict_only]  # each child covers the modes itself

_PRELUDE = """
    import glob, os, sys, tempfile
    import torch, torch_tpu
    if not torch_tpu._C._host_gemm_enabled():
        print("SKIP: built without jaxlib's XLA FFI header"); sys.exit(0)
    g = torch.Generator().manual_seed(0)
    def rnd(*s): return torch.randn(*s, generator=g)
"""


def _run(body):
    r = run_python(_PRELUDE + body, env={"TORCH_TPU_CPU_HOST_GEMM": "1"}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    if "SKIP:" in r.stdout:
        pytest.skip(r.stdout.strip())
    assert "ok" in r.stdout, r.stdout + r.stderr


def test_every_form_matches_cpu_in_every_mode():
    _run("""
    M, K, N, B = 96, 80, 72, 3   # m*n*k over the call's threshold; odd sizes
    f2 = {"nn": (lambda a, b: a @ b, (M, K), (K, N)),
          "nt": (lambda a, b: a @ b.t(), (M, K), (N, K)),
          "tn": (lambda a, b: a.t() @ b, (K, M), (K, N)),
          "tt": (lambda a, b: a.t() @ b.t(), (K, M), (N, K))}
    cases = []
    for name, (f, sa, sb) in f2.items():
        cases.append((name, f, rnd(*sa), rnd(*sb)))
    cases += [("bnn", lambda a, b: torch.bmm(a, b), rnd(B, M, K), rnd(B, K, N)),
              ("bnt", lambda a, b: a @ b.transpose(1, 2), rnd(B, M, K), rnd(B, N, K)),
              ("btn", lambda a, b: a.transpose(1, 2) @ b, rnd(B, K, M), rnd(B, K, N)),
              ("btt", lambda a, b: a.transpose(1, 2) @ b.transpose(1, 2), rnd(B, K, M), rnd(B, N, K)),
              ("4d", lambda a, b: a @ b, rnd(2, 2, M, K), rnd(2, 2, K, N))]
    for mode in ("strict_eager", "defer_and_fuse"):
        torch_tpu.set_execution_mode(mode)
        for name, f, a, b in cases:
            got = f(a.to("tpu"), b.to("tpu")).cpu()
            torch.testing.assert_close(got, f(a, b), rtol=1e-5, atol=1e-4, msg=f"{mode} {name}")
    torch_tpu.set_execution_mode("strict_eager")
    h = lambda a, b, c: torch.relu(a @ b) @ c.t()
    a, b, c = rnd(M, K), rnd(K, N), rnd(M, N)
    got = torch.compile(h, backend="tpu")(a.to("tpu"), b.to("tpu"), c.to("tpu")).cpu()
    torch.testing.assert_close(got, h(a, b, c), rtol=1e-5, atol=1e-4)
    # A linear layer's forward and backward (the weight gradient is the tn form).
    lin = torch.nn.Linear(K, N); tlin = torch.nn.Linear(K, N).to("tpu")
    tlin.load_state_dict(lin.state_dict())
    x = rnd(2, M, K); xt = x.to("tpu").requires_grad_(True); x.requires_grad_(True)
    (lin(x) ** 2).sum().backward(); (tlin(xt) ** 2).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(tlin.weight.grad.cpu(), lin.weight.grad, rtol=1e-4, atol=1e-3)
    print("ok")
    """)


def test_which_products_take_the_call():
    """Big float32 products become the custom call; small ones and other dtypes stay
    XLA dots."""
    _run("""
    d = tempfile.mkdtemp()
    torch_tpu.debug.set_dump_dir(d)
    big = rnd(96, 80).to("tpu") @ rnd(80, 72).to("tpu")
    small = rnd(8, 8).to("tpu") @ rnd(8, 8).to("tpu")
    f64 = rnd(96, 80).double().to("tpu") @ rnd(80, 72).double().to("tpu")
    torch.tpu.synchronize()
    torch_tpu.debug.set_dump_dir(None)
    texts = [open(p).read() for p in glob.glob(os.path.join(d, "*.mlir"))]
    calls = [t for t in texts if "torch_tpu.gemm_nn" in t]
    dots = [t for t in texts if "stablehlo.dot_general" in t]
    assert any("tensor<96x72xf32>" in t for t in calls), texts
    assert any("tensor<8x8xf32>" in t for t in dots), texts
    assert any("f64" in t for t in dots) and not any("f64" in t for t in calls), texts
    print("ok")
    """)


def test_off_by_default():
    assert not torch_tpu._C._host_gemm_enabled()

"""Defer & Fuse's dynamic buckets (torch_tpu/dynamo/deferred_buckets.py): a
forward whose input length changes runs as the padded program of its length's
bucket once its trace verifies against a template learnt at other lengths, with
the compiled mode's masking rules; results equal the CPU's; fused programs are
counted per bucket, not per length; a static dim equal to the dynamic size is not
mistaken for it; a trace that does not verify runs per size, exactly."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu import _C
from torch_tpu.dynamo import deferred_buckets

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.fixture(autouse=True)
def defer_and_fuse():
    deferred_buckets.reset()
    prev = torch_tpu.set_dynamic_buckets("pow2")
    with torch_tpu.execution_mode("defer_and_fuse"):
        yield
    torch_tpu.set_dynamic_buckets(prev)


def _misses():
    return _C._deferred_stats()["fused_cache_misses"]


class Encoder(torch.nn.Module):
    """One BERT-style layer and several poolings: every op family the masking rules
    cover along the dynamic length."""

    def __init__(self, vocab=40, hidden=16, heads=2, max_len=64):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, hidden)
        self.pos = torch.nn.Embedding(max_len, hidden)
        self.ln = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)

    def forward(self, ids, mask):
        b, s = ids.shape
        x = self.emb(ids) + self.pos(torch.arange(s, device=ids.device))
        x = self.ln(x)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        d = x.shape[-1] // self.heads
        q, k, v = (t.reshape(b, s, self.heads, d).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(~mask[:, None, None, :], -1e9)
        y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1)
        x = self.ln2(x + self.out(y))
        first = x[..., 0]
        top = first.topk(2, dim=1)
        return (x.mean(1), x.sum(1), x[:, 0], x.cumsum(1)[:, -1],
                first.sort(dim=1).values[:, :2], top.values, first.argmax(1),
                torch.gather(first, 1, top.indices), x)


def _inputs(n, seed, batch=2):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 40, (batch, n), generator=g)
    mask = torch.ones(batch, n, dtype=torch.bool)
    mask[1, n // 2 + 1:] = False
    return ids, mask


def _compare(ref, out):
    for r, o in zip(ref, out):
        assert o.shape == r.shape and o.dtype == r.dtype
        if r.dtype.is_floating_point:
            torch.testing.assert_close(o.cpu(), r, **TOL)
        else:
            assert torch.equal(o.cpu(), r)


def test_encoder_runs_on_buckets():
    torch.manual_seed(0)
    cpu = Encoder().eval()
    dev = copy.deepcopy(cpu).to("tpu")
    lengths = (5, 9, 7, 12, 3, 14, 6, 16, 11, 13)
    before = _misses()
    with torch.no_grad():
        for i, n in enumerate(lengths):
            ids, mask = _inputs(n, i)
            ref = cpu(ids, mask)
            out = dev(ids.to("tpu"), mask.to("tpu"))
            _compare(ref, out)
    compiled = _misses() - before
    s = deferred_buckets.stats()
    buckets = {4, 8, 16}
    # two lengths learn the template (one program each), then one program per bucket
    assert s["bucketed"] == len(lengths) - 2, s
    assert compiled <= len(buckets) + 2, (compiled, s)


def test_static_dim_equal_to_dynamic_size():
    # hidden is 8; length 8 comes after the template was learnt at 5 and 11 and
    # confirmed at 6: the hidden dim stays static, the length is the one dynamic size
    torch.manual_seed(1)
    w = torch.randn(8, 8)

    def f(x):
        h = x @ w.to(x.device)
        return h.softmax(1), h.mean(-1), h.sum(1), x.transpose(1, 2).cumsum(-1)

    with torch.no_grad():
        for i, n in enumerate((5, 11, 6, 8, 3, 8)):
            x = torch.randn(2, n, 8, generator=torch.Generator().manual_seed(i))
            _compare(f(x), f(x.to("tpu")))
    s = deferred_buckets.stats()
    assert s["bucketed"] >= 3, s


def test_trace_that_does_not_verify_runs_per_size():
    # arange's end follows the length up to 6, then stays: at 9 the trace no longer
    # matches the template learnt at 2, 3 and 4, and runs as its own program
    def f(x):
        n = min(x.shape[1], 6)
        # a float arange: an integer one would run on the host, node by node
        return x.cumsum(1), torch.arange(n, device=x.device, dtype=torch.float32) * 2

    with torch.no_grad():
        for i, n in enumerate((2, 3, 4, 9, 5)):
            x = torch.randn(2, n, generator=torch.Generator().manual_seed(i))
            _compare(f(x), f(x.to("tpu")))
    s = deferred_buckets.stats()
    assert s["unverified"] >= 1 and s["bucketed"] >= 2, s


def test_recurring_size_gets_its_own_program(monkeypatch):
    # TORCH_TPU_DEFER_BUCKETS_HOT=2: length 5 runs padded twice, its third run compiles
    # its own exact-size program, and later runs at 5 are plain cache hits (no miss, no
    # padded run); results stay exact throughout
    monkeypatch.setenv("TORCH_TPU_DEFER_BUCKETS_HOT", "2")

    def f(x):
        return x.softmax(1), x.cumsum(1), x.mean(1)

    def run(n, seed):
        x = torch.randn(2, n, generator=torch.Generator().manual_seed(seed))
        _compare(f(x), f(x.to("tpu")))

    with torch.no_grad():
        for i, n in enumerate((2, 3, 4)):  # learn and confirm (4 runs padded)
            run(n, i)
        for i in range(2):
            run(5, 10 + i)
        s = deferred_buckets.stats()
        assert s["bucketed"] == 3 and s["promoted"] == 0, s
        before = _misses()
        run(5, 20)  # promoted: compiles length 5's own program
        s = deferred_buckets.stats()
        assert s["promoted"] == 1 and s["bucketed"] == 3, s
        assert _misses() - before == 1
        before = _misses()
        for i in range(3):
            run(5, 30 + i)  # its cached program: no miss, nothing offered
        assert _misses() == before
        assert deferred_buckets.stats()["bucketed"] == 3


def test_opt_out(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_DEFER_BUCKETS", "0")
    with torch.no_grad():
        for i, n in enumerate((2, 3, 4, 5)):
            x = torch.randn(2, n, generator=torch.Generator().manual_seed(i))
            _compare((x.softmax(1),), (x.to("tpu").softmax(1),))
    assert deferred_buckets.stats()["bucketed"] == 0


def test_training_step_runs_per_size_and_exact():
    # a trace with autograd's backward in it is never padded: per size, exact
    torch.manual_seed(2)
    cpu = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    dev = copy.deepcopy(cpu).to("tpu")
    for i, n in enumerate((3, 5, 6, 7)):
        x = torch.randn(2, n, 4, generator=torch.Generator().manual_seed(i))
        for m, t in ((cpu, x), (dev, x.to("tpu"))):
            m.zero_grad()
            F.softmax(m(t), dim=1).pow(2).sum().backward()
        for a, b in zip(cpu.parameters(), dev.parameters()):
            torch.testing.assert_close(b.grad.cpu(), a.grad, **TOL)
    assert deferred_buckets.stats()["bucketed"] == 0

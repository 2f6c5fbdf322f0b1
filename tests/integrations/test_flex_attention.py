"""FlexAttention on tpu (docs/flex_attention.md): flex_attention after
torch_tpu.integrations.flex_attention.enable(), forward and backward, in Strict Eager,
Defer & Fuse, torch.compile(backend="tpu") and the default (inductor) backend, against
PyTorch's CPU: SDPA with the equivalent dense mask / bias (the CPU's flex_attention
refuses backward), and the CPU's flex_attention forward."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import (
    AuxRequest,
    BlockMask,
    create_block_mask,
    flex_attention,
)

import torch_tpu
import torch_tpu.integrations.flex_attention as tpu_flex
from conftest import assert_close_cpu

B, H, L, E, BLOCK = 2, 4, 64, 16, 16
TOL = dict(rtol=1e-4, atol=2e-5)


@pytest.fixture
def enabled():
    tpu_flex.enable()
    yield
    tpu_flex.disable()


# The variants: a mask_mod (None: no mask), a score_mod (None: identity), and the same
# attention as an SDPA mask / additive bias over [H, L, L] for the reference.
def _causal(b, h, q, k):
    return q >= k


def _window(b, h, q, k):
    return (q >= k) & (q - k <= 8)


_DOCS = torch.tensor([0] * 20 + [1] * 12 + [2] * 32)


def _doc_mask(docs):
    def mask(b, h, q, k):
        return (docs[q] == docs[k]) & (q >= k)
    return mask


def _slopes():
    return torch.tensor([2.0 ** (-8 * (i + 1) / H) for i in range(H)])


def _alibi(slopes):
    def score_mod(score, b, h, q, k):
        return score + slopes[h] * (k - q)
    return score_mod


def _variant(name, device):
    """(mask_mod, score_mod) on `device`, and the CPU reference's (bool mask, bias)."""
    q, k = torch.arange(L)[:, None], torch.arange(L)[None, :]
    causal = (q >= k).expand(H, L, L)
    if name == "causal":
        return (_causal, None), (causal, None)
    if name == "sliding_window":
        return (_window, None), (causal & (q - k <= 8), None)
    if name == "document":
        same = _DOCS[:, None] == _DOCS[None, :]
        return (_doc_mask(_DOCS.to(device)), None), (causal & same, None)
    if name == "alibi":
        bias = _slopes()[:, None, None] * (k - q).float()
        return (_causal, _alibi(_slopes().to(device))), (causal, bias)
    raise ValueError(name)


def _reference(q, k, v, mask, bias, enable_gqa=False):
    attn = torch.zeros(H, L, L).masked_fill(~mask, float("-inf"))
    if bias is not None:
        attn = attn + bias
    return F.scaled_dot_product_attention(q, k, v, attn_mask=attn, enable_gqa=enable_gqa)


def _inputs(kv_heads=H):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, L, E, generator=g)
    k, v = (torch.randn(B, kv_heads, L, E, generator=g) for _ in range(2))
    grad = torch.randn(B, H, L, E, generator=g)
    return q, k, v, grad


def _run(mode, fn, *args):
    """`fn(*args)` on tpu in one of the four ways, forward and backward together."""
    if mode == "fused":
        with torch_tpu.execution_mode("defer_and_fuse"):
            return fn(*args)
    if mode in ("compiled", "inductor"):
        torch._dynamo.reset()
        backend = "tpu" if mode == "compiled" else "inductor"
        return torch.compile(fn, backend=backend)(*args)
    return fn(*args)


def _forward_backward(q, k, v, grad, **flex_kwargs):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = flex_attention(q, k, v, **flex_kwargs)
    out.backward(grad)
    return out.detach(), q.grad, k.grad, v.grad


def _check(mode, name, kv_heads=H):
    fallbacks = torch_tpu.debug.metrics()["cpu_fallback_ops"]
    q, k, v, grad = _inputs(kv_heads)
    gqa = kv_heads != H
    (mask_mod, score_mod), (mask, bias) = _variant(name, "tpu")[0], _variant(name, "cpu")[1]
    block_mask = create_block_mask(mask_mod, None, None, L, L, device="tpu", BLOCK_SIZE=BLOCK)

    def step(q, k, v, grad):
        return _forward_backward(q, k, v, grad, score_mod=score_mod, block_mask=block_mask,
                                 enable_gqa=gqa)
    got = _run(mode, step, *(t.to("tpu") for t in (q, k, v, grad)))
    torch.tpu.synchronize()
    assert torch_tpu.debug.metrics()["cpu_fallback_ops"] == fallbacks  # all of it on tpu

    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    ref = _reference(qr, kr, vr, mask, bias, enable_gqa=gqa)
    ref.backward(grad)
    for tpu_t, cpu_t in zip(got, (ref.detach(), qr.grad, kr.grad, vr.grad)):
        assert_close_cpu(tpu_t, cpu_t, **TOL)

    # The CPU's own flex_attention (forward: it refuses backward) agrees too.
    cpu_mask_mod, cpu_score_mod = _variant(name, "cpu")[0]
    cpu_block_mask = create_block_mask(cpu_mask_mod, None, None, L, L, device="cpu",
                                       BLOCK_SIZE=BLOCK)
    cpu_flex = flex_attention(q, k, v, score_mod=cpu_score_mod, block_mask=cpu_block_mask,
                              enable_gqa=gqa)
    assert_close_cpu(got[0], cpu_flex, **TOL)


VARIANTS = ["causal", "sliding_window", "document", "alibi"]


def test_flex_attention_needs_the_opt_in_and_leaves_other_devices_alone():
    q = torch.randn(1, 1, 8, 4, device="tpu")
    assert not tpu_flex.is_enabled()
    with pytest.raises(ValueError, match="FlexAttention is only supported"):
        flex_attention(q, q, q)
    tpu_flex.enable()
    try:
        tpu_flex.enable()  # idempotent
        assert tpu_flex.is_enabled()
        assert flex_attention(q, q, q).device.type == "tpu"
        # Every other device still gets PyTorch's own check (the CPU refuses backward).
        x = torch.randn(1, 1, 8, 4, requires_grad=True)
        with pytest.raises(NotImplementedError, match="backward on CPU"):
            flex_attention(x, x, x)
    finally:
        tpu_flex.disable()
    with pytest.raises(ValueError, match="FlexAttention is only supported"):
        flex_attention(q, q, q)


def test_causal_alibi_forward_backward_strict_eager(enabled):
    """The default run's smoke test: one mask_mod + score_mod with captured buffer."""
    _check("eager", "alibi")


@pytest.mark.slow
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("mode", ["eager", "fused"])
def test_masks_and_score_mods_match_sdpa(enabled, mode, name):
    _check(mode, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("mode", ["compiled", "inductor"])
def test_masks_and_score_mods_match_sdpa_compiled(enabled, mode, name):
    _check(mode, name)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "fused", "compiled"])
def test_grouped_query_attention(enabled, mode):
    _check(mode, "causal", kv_heads=2)


@pytest.mark.slow
def test_block_lists_are_honoured_as_a_mask(enabled):
    """A BlockMask made from block lists alone (no mask_mod): only the listed blocks
    are attended, partial blocks through mask_mod, full blocks whole, as the fused
    kernels do (PyTorch's dense math kernel would attend everywhere)."""
    q, k, v, grad = _inputs()
    nq, nk = L // BLOCK, L // BLOCK
    # Query block i sees kv block 0 whole and kv block i through a causal mask_mod.
    kv_num = torch.ones(1, 1, nq, dtype=torch.int32)
    kv_idx = torch.arange(nq, dtype=torch.int32).view(1, 1, nq, 1).expand(1, 1, nq, nk).contiguous()
    full_num = (torch.arange(nq) > 0).int().view(1, 1, nq)
    full_idx = torch.zeros(1, 1, nq, nk, dtype=torch.int32)

    def make(device):
        return BlockMask.from_kv_blocks(kv_num.to(device), kv_idx.to(device),
                                        full_num.to(device), full_idx.to(device),
                                        BLOCK_SIZE=BLOCK, mask_mod=_causal)
    got = _forward_backward(*(t.to("tpu") for t in (q, k, v, grad)), block_mask=make("tpu"))

    qi, ki = torch.arange(L)[:, None], torch.arange(L)[None, :]
    same_block = (qi // BLOCK == ki // BLOCK) & (qi >= ki)
    first_block = (ki < BLOCK) & (qi >= BLOCK)
    mask = (same_block | first_block).expand(H, L, L)
    qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
    ref = _reference(qr, kr, vr, mask, None)
    ref.backward(grad)
    for tpu_t, cpu_t in zip(got, (ref.detach(), qr.grad, kr.grad, vr.grad)):
        assert_close_cpu(tpu_t, cpu_t, **TOL)


@pytest.mark.slow
def test_logsumexp_and_score_mod_buffer_gradient(enabled):
    """return_aux's logsumexp matches the CPU's; a score_mod's captured tensor that
    requires grad (learned ALiBi slopes) gets the CPU's gradient (via SDPA's bias)."""
    q, k, v, grad = _inputs()
    slopes = _slopes()
    block_mask = create_block_mask(_causal, None, None, L, L, device="tpu", BLOCK_SIZE=BLOCK)
    tpu_slopes = slopes.to("tpu").requires_grad_()
    out, aux = flex_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), score_mod=_alibi(tpu_slopes),
                              block_mask=block_mask, return_aux=AuxRequest(lse=True))
    out.backward(grad.to("tpu"))

    cpu_mask = create_block_mask(_causal, None, None, L, L, device="cpu", BLOCK_SIZE=BLOCK)
    _, cpu_aux = flex_attention(q, k, v, score_mod=_alibi(slopes), block_mask=cpu_mask,
                                return_aux=AuxRequest(lse=True))
    assert_close_cpu(aux.lse, cpu_aux.lse, **TOL)

    ref_slopes = slopes.clone().requires_grad_()
    qi, ki = torch.arange(L)[:, None], torch.arange(L)[None, :]
    bias = ref_slopes[:, None, None] * (ki - qi).float()
    ref = _reference(q, k, v, (qi >= ki).expand(H, L, L), bias)
    ref.backward(grad)
    assert_close_cpu(tpu_slopes.grad, ref_slopes.grad, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_autocast_runs_attention_in_bfloat16(enabled):
    q, k, v, grad = (t.to("tpu") for t in _inputs())
    block_mask = create_block_mask(_causal, None, None, L, L, device="tpu", BLOCK_SIZE=BLOCK)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = flex_attention(q, k, v, block_mask=block_mask)
    assert out.dtype == torch.bfloat16
    qi, ki = torch.arange(L)[:, None], torch.arange(L)[None, :]
    ref = _reference(*(t.cpu().bfloat16().float() for t in (q, k, v)), (qi >= ki).expand(H, L, L), None)
    assert_close_cpu(out, ref.bfloat16(), rtol=2e-2, atol=2e-2)


@pytest.mark.slow
def test_inductor_cached_flex_graph_runs_in_a_later_process(tmp_path):
    """Inductor caches a compiled flex_attention graph on disk; a later process that
    hits that cache runs the graph (with its score_mod subgraph and captured tensor)
    from the file torch_tpu kept beside it."""
    from conftest import run_python
    code = """
        import torch, torch_tpu, warnings
        warnings.filterwarnings("ignore")
        from torch._dynamo.utils import counters
        from torch.nn.attention.flex_attention import flex_attention
        import torch_tpu.integrations.flex_attention as tpu_flex
        tpu_flex.enable()
        slopes = torch.tensor([0.5, 0.25])
        def alibi(score, b, h, q, k):
            return score + s[h] * (k - q)
        q = torch.randn(1, 2, 32, 8, generator=torch.Generator().manual_seed(0))
        s = slopes
        ref = flex_attention(q, q, q, score_mod=alibi)
        s = slopes.to("tpu")
        out = torch.compile(flex_attention)(q.to("tpu"), q.to("tpu"), q.to("tpu"), score_mod=alibi)
        torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=2e-5)
        print("hits", counters["inductor"]["fxgraph_cache_hit"])
    """
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "TORCH_TPU_CACHE_DIR": str(tmp_path / "tpu")}
    first = run_python(code, env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "hits 0" in first.stdout
    second = run_python(code, env=env, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "hits 0" not in second.stdout and "hits" in second.stdout, second.stdout

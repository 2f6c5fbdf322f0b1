"""The serving ops torch.ops.tpu.write_kv_cache(_) and torch.ops.tpu.paged_attention
(csrc/lower/paged_attention.cc) against a dense reference on the CPU: each request's
keys and values laid out contiguously, causal attention with PyTorch's own SDPA.
Prefill, decode and mixed batches, GQA, sliding window, soft cap, padded token and
request counts; in Strict Eager and Defer & Fuse (parametrised by conftest), under
torch.compile(backend="tpu"), and bad input."""
import math

import pytest
import torch

import torch_tpu

BLOCK = 4


def make_batch(q_lens, ctx_lens, heads=4, kv_heads=2, dim=8, num_blocks=24, pad_tokens=0,
               pad_reqs=0, dtype=torch.float32, seed=0):
    """A batch of requests r with q_lens[r] new tokens at the end of ctx_lens[r]
    positions; blocks handed out in a shuffled order so the tables are not the identity."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max(math.ceil(c / BLOCK) for c in ctx_lens) + 1
    order = torch.randperm(num_blocks, generator=g).tolist()
    tables = torch.zeros(len(ctx_lens) + pad_reqs, max_blocks, dtype=torch.int32)
    keys, values = [], []
    kv_cache = torch.randn(2, num_blocks, BLOCK, kv_heads, dim, generator=g).to(dtype)
    for r, c in enumerate(ctx_lens):
        n = math.ceil(c / BLOCK)
        tables[r, :n] = torch.tensor([order.pop() for _ in range(n)])
        keys.append(kv_cache[0, tables[r, :n]].reshape(-1, kv_heads, dim)[:c])
        values.append(kv_cache[1, tables[r, :n]].reshape(-1, kv_heads, dim)[:c])
    total = sum(q_lens)
    query = torch.randn(total + pad_tokens, heads, dim, generator=g).to(dtype)
    seq_lens = torch.tensor(list(ctx_lens) + [0] * pad_reqs, dtype=torch.int32)
    starts = torch.tensor([0] + list(torch.tensor(q_lens).cumsum(0)) + [total] * pad_reqs,
                          dtype=torch.int32)
    return query, kv_cache, tables, seq_lens, starts, keys, values


def reference(query, keys, values, q_lens, scale, window=-1, soft_cap=0.0):
    """Dense causal attention per request on the CPU, in float32."""
    outs, start = [], 0
    for k, v, n in zip(keys, values, q_lens):
        q = query[start:start + n].float().transpose(0, 1)  # [H, n, D]
        k = k.float().transpose(0, 1).repeat_interleave(q.shape[0] // k.shape[1], 0)
        v = v.float().transpose(0, 1).repeat_interleave(q.shape[0] // v.shape[1], 0)
        c = k.shape[1]
        pos = torch.arange(c - n, c)[:, None]
        kv = torch.arange(c)[None, :]
        mask = kv <= pos
        if window > 0:
            mask &= kv > pos - window
        s = (q @ k.transpose(1, 2)) * scale
        if soft_cap > 0:
            s = soft_cap * torch.tanh(s / soft_cap)
        s = s.masked_fill(~mask, float("-inf"))
        outs.append((s.softmax(-1) @ v).transpose(0, 1))
        start += n
    return torch.cat(outs)


def run(query, kv_cache, tables, seq_lens, starts, scale, window=-1, soft_cap=0.0):
    dev = [t.to("tpu") for t in (query, kv_cache, tables, seq_lens, starts)]
    return torch.ops.tpu.paged_attention(*dev, scale, window, soft_cap).cpu()


@pytest.mark.parametrize("q_lens,ctx_lens", [
    ([5, 3, 9], [5, 3, 9]),          # prefill of three prompts
    ([1, 1, 1, 1], [7, 1, 13, 20]),  # decode
    ([6, 1, 2, 1], [6, 9, 14, 4]),   # mixed: a prefill, decodes, a chunk of a longer prompt
])
def test_matches_dense_reference(q_lens, ctx_lens):
    query, kv, tables, lens, starts, keys, values = make_batch(q_lens, ctx_lens)
    scale = 0.3
    out = run(query, kv, tables, lens, starts, scale)
    torch.testing.assert_close(out, reference(query, keys, values, q_lens, scale),
                               rtol=1e-5, atol=1e-5)


def test_padded_tokens_and_requests_give_zeros_and_change_nothing():
    q_lens, ctx_lens = [3, 1], [3, 10]
    query, kv, tables, lens, starts, keys, values = make_batch(q_lens, ctx_lens, pad_tokens=5,
                                                               pad_reqs=2)
    out = run(query, kv, tables, lens, starts, 0.5)
    torch.testing.assert_close(out[:4], reference(query, keys, values, q_lens, 0.5),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(out[4:], torch.zeros_like(out[4:]))


def test_sliding_window_and_soft_cap():
    q_lens, ctx_lens = [7, 1, 2], [7, 15, 11]
    query, kv, tables, lens, starts, keys, values = make_batch(q_lens, ctx_lens, heads=6,
                                                               kv_heads=3)
    for window, cap in [(4, 0.0), (-1, 2.5), (3, 1.5)]:
        out = run(query, kv, tables, lens, starts, 0.7, window, cap)
        torch.testing.assert_close(out, reference(query, keys, values, q_lens, 0.7, window, cap),
                                   rtol=1e-5, atol=1e-5)


_WINDOW_BATCHES = {
    "prefill": ([9, 13, 5], [9, 13, 5]),
    "decode": ([1, 1, 1, 1], [7, 2, 15, 22]),
    "mixed": ([10, 1, 3, 1], [10, 17, 14, 6]),  # a prefill, decodes, a chunk of a prompt
}


@pytest.mark.parametrize("compiled", [False, True], ids=["op", "compiled"])
@pytest.mark.parametrize("batch", sorted(_WINDOW_BATCHES))
@pytest.mark.parametrize("window", [3, 6])  # shorter than a block (4), and spanning blocks
def test_sliding_window_matches_dense_reference(batch, window, compiled):
    """Sliding-window attention (GQA 6/2) in prefill, decode and mixed batches, with
    padded tokens and requests; as a plain op call in Strict Eager and Defer & Fuse
    (conftest), and inside torch.compile(backend="tpu")."""
    q_lens, ctx_lens = _WINDOW_BATCHES[batch]
    query, kv, tables, lens, starts, keys, values = make_batch(
        q_lens, ctx_lens, heads=6, kv_heads=2, pad_tokens=3, pad_reqs=1, seed=window)

    def attend(q, cache, tab, seq, qsl):
        return torch.ops.tpu.paged_attention(q, cache, tab, seq, qsl, 0.45, window)

    fn = torch.compile(attend, backend="tpu", fullgraph=True, dynamic=False) if compiled \
        else attend
    out = fn(*[t.to("tpu") for t in (query, kv, tables, lens, starts)]).cpu()
    n = sum(q_lens)
    expect = reference(query, keys, values, q_lens, 0.45, window)
    torch.testing.assert_close(out[:n], expect, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[n:], torch.zeros_like(out[n:]))
    # The window changes the result of every batch here (it is shorter than a context).
    assert not torch.allclose(expect, reference(query, keys, values, q_lens, 0.45))


def test_bfloat16():
    q_lens, ctx_lens = [4, 1], [4, 9]
    query, kv, tables, lens, starts, keys, values = make_batch(q_lens, ctx_lens,
                                                               dtype=torch.bfloat16)
    out = run(query, kv, tables, lens, starts, 0.35)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference(query, keys, values, q_lens, 0.35),
                               rtol=2e-2, atol=2e-2)


def test_scale_is_a_runtime_value(metrics_delta):
    query, kv, tables, lens, starts, keys, values = make_batch([2, 1], [2, 6])
    run(query, kv, tables, lens, starts, 0.1)
    torch_tpu.synchronize()
    compiles = metrics_delta("programs_compiled")
    for scale in (0.2, 0.9):
        out = run(query, kv, tables, lens, starts, scale)
        torch.testing.assert_close(out, reference(query, keys, values, [2, 1], scale),
                                   rtol=1e-5, atol=1e-5)
    assert metrics_delta("programs_compiled") == compiles


def test_write_kv_cache_in_place_skips_padding():
    kv = torch.randn(2, 6, BLOCK, 2, 8)
    key, value = torch.randn(5, 2, 8), torch.randn(5, 2, 8)
    slots = torch.tensor([3, 17, -1, 0, 22])
    expect = kv.clone().view(2, -1, 2, 8)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            expect[0, s], expect[1, s] = key[t], value[t]
    dev = kv.to("tpu")
    view = dev[1]  # a view of the same storage sees the write
    torch.ops.tpu.write_kv_cache_(dev, key.to("tpu"), value.to("tpu"), slots.to("tpu"))
    assert torch.equal(dev.cpu(), expect.view_as(kv))
    assert torch.equal(view.cpu(), expect.view_as(kv)[1])
    functional = torch.ops.tpu.write_kv_cache(kv.to("tpu"), key.to("tpu"), value.to("tpu"),
                                              slots.to("tpu"))
    assert torch.equal(functional.cpu(), expect.view_as(kv))


@pytest.mark.strict_only
def test_write_kv_cache_updates_the_cache_in_place(metrics_delta):
    """The program aliases the cache to its result, and the launch donates the cache's
    buffer when nothing else holds it: no copy of the whole cache per step."""
    kv = torch.zeros(2, 8, BLOCK, 2, 8).to("tpu")  # (torch.zeros on tpu may share a buffer)
    key = torch.ones(3, 2, 8, device="tpu")
    slots = torch.tensor([1, 9, -1], device="tpu")
    before = kv.sum()  # an earlier reader of the buffer that is donated next
    # Without pipelined compilation: its cold first write is recorded behind pending
    # ops that still hold the cache's buffer, so that one launch copies instead of
    # donating (2 of 3); the steady state donates either way.
    with torch_tpu.debug.pipelined_compile(False):
        for step in range(3):
            torch.ops.tpu.write_kv_cache_(kv, key * step, key * step, slots)
    assert before.item() == 0
    assert metrics_delta("donated_inputs") == 3
    expect = torch.zeros(2, 8 * BLOCK, 2, 8)
    expect[:, [1, 9]] = 2.0
    assert torch.equal(kv.cpu(), expect.view(2, 8, BLOCK, 2, 8))
    # Copies and views stay right: a clone keeps the old contents, a view of the
    # storage sees the new ones.
    snapshot = kv.clone()
    alias = torch.empty(0, device="tpu").set_(kv.untyped_storage(), 0, kv.shape)
    torch.ops.tpu.write_kv_cache_(kv, key * 5, key * 5, slots)
    assert alias.cpu()[0].reshape(-1, 2, 8)[1, 0, 0] == 5.0  # a view of the storage sees it
    assert torch.equal(snapshot.cpu(), expect.view(2, 8, BLOCK, 2, 8))


def test_write_then_attend_under_torch_compile():
    """One decode step as a model runner writes it: cache write, then attention, compiled."""
    q_lens, ctx_lens = [1, 1], [5, 9]
    query, kv, tables, lens, starts, keys, values = make_batch(q_lens, ctx_lens)
    new_k, new_v = torch.randn(2, 2, 8), torch.randn(2, 2, 8)
    slots = torch.stack([tables[0, 1] * BLOCK + 0, tables[1, 2] * BLOCK + 0]).long()
    keys[0][4], values[0][4] = new_k[0], new_v[0]
    keys[1][8], values[1][8] = new_k[1], new_v[1]

    def step(q, cache, k, v, slot_mapping, tab, seq, qsl):
        torch.ops.tpu.write_kv_cache_(cache, k, v, slot_mapping)
        return torch.ops.tpu.paged_attention(q, cache, tab, seq, qsl, 0.4)

    compiled = torch.compile(step, backend="tpu", fullgraph=True)
    args = [t.to("tpu") for t in (query, kv, new_k, new_v, slots, tables, lens, starts)]
    out = compiled(*args).cpu()
    torch.testing.assert_close(out, reference(query, keys, values, q_lens, 0.4),
                               rtol=1e-5, atol=1e-5)
    assert torch.equal(args[1][0].cpu().view(-1, 2, 8)[slots], new_k)


def _decode_step(q, cache, k, v, slot_mapping, tab, seq, qsl):
    torch.ops.tpu.write_kv_cache_(cache, k, v, slot_mapping)
    return torch.ops.tpu.paged_attention(q, cache, tab, seq, qsl, 0.4)


def _decode_batch():
    """Two decode requests whose new token lands at position 4 and 8 (a cache size of
    its own: programs compiled by other tests are not hits here)."""
    query, kv, tables, lens, starts, keys, values = make_batch([1, 1], [5, 9], num_blocks=20)
    slots = torch.stack([tables[0, 1] * BLOCK, tables[1, 2] * BLOCK]).long()
    return query, kv, tables, lens, starts, slots


def test_write_and_attend_steps_update_the_cache_in_place(metrics_delta):
    """A serving step (write, then attend) per synchronize: in Strict Eager each write is
    its own donated program; in Defer & Fuse the step is one fused program that aliases
    the cache to its output (no copy of the cache) and donates it every step."""
    query, kv, tables, lens, starts, slots = _decode_batch()
    dev = [t.to("tpu") for t in (query, kv, tables, lens, starts, slots)]
    q, cache, tab, seq, qsl, sl = dev
    expect = kv.clone().view(2, -1, 2, 8)
    for step in range(3):
        k = torch.full((2, 2, 8), float(step + 1))
        out = _decode_step(q, cache, k.to("tpu"), (-k).to("tpu"), sl, tab, seq, qsl)
        torch.tpu.synchronize()
        expect[0, slots], expect[1, slots] = k, -k
    assert metrics_delta("donated_inputs") == 3
    assert torch.equal(cache.cpu(), expect.view_as(kv))
    assert out.shape == query.shape


@pytest.mark.strict_only
def test_compiled_step_aliases_the_cache(tmp_path, metrics_delta):
    """Under torch.compile the functionalized write (clone, write, copy_ back) is one
    program whose cache parameter is aliased to its output, donated on every call;
    a bad slot raises and, as in Strict Eager, the valid writes stay (no rollback,
    which would keep a copy of the old cache)."""
    query, kv, tables, lens, starts, slots = _decode_batch()
    q, cache, tab, seq, qsl, sl = [t.to("tpu") for t in (query, kv, tables, lens, starts, slots)]
    torch_tpu.debug.set_dump_dir(str(tmp_path))
    try:
        compiled = torch.compile(_decode_step, backend="tpu", fullgraph=True, dynamic=False)
        torch._dynamo.reset()
        for step in range(4):
            k = torch.full((2, 2, 8), float(step + 1), device="tpu")
            compiled(q, cache, k, -k, sl, tab, seq, qsl)
            torch.tpu.synchronize()
    finally:
        torch_tpu.debug.set_dump_dir(None)
    graphs = [g for g in torch_tpu.debug.compiled_graphs()
              if "aten.copy_.default" in g["ops"] and g["stablehlo_files"]]
    assert graphs and graphs[-1]["direct_calls"] >= 3
    hlo = torch_tpu.debug.compiled_graph_stablehlo(graphs[-1]["id"])
    assert hlo.count("tf.aliasing_output") == 1
    assert metrics_delta("donated_inputs") >= 3  # every direct call (the capture keeps it)
    expect = kv.clone().view(2, -1, 2, 8)
    expect[0, slots], expect[1, slots] = 4.0, -4.0
    assert torch.equal(cache.cpu(), expect.view_as(kv))

    bad = torch.tensor([int(slots[0]), 10_000], device="tpu")
    with pytest.raises(IndexError, match="slot 10000 is out of range"):
        compiled(q, cache, torch.full((2, 2, 8), 9.0, device="tpu"),
                 torch.full((2, 2, 8), 9.0, device="tpu"), bad, tab, seq, qsl)
        torch.tpu.synchronize()
    expect[0, slots[0]], expect[1, slots[0]] = 9.0, 9.0
    assert torch.equal(cache.cpu(), expect.view_as(kv))


def test_bad_input_raises():
    query, kv, tables, lens, starts, _, _ = make_batch([2], [2])
    bad_tables = tables.clone()
    bad_tables[0, 0] = 99
    with pytest.raises(IndexError, match="out of range"):
        run(query, kv, bad_tables, lens, starts, 1.0)
    with pytest.raises(IndexError, match="does not fit"):
        run(query, kv, tables, torch.tensor([400], dtype=torch.int32), starts, 1.0)
    with pytest.raises(RuntimeError, match="kv heads"):
        run(query[:, :3], kv, tables, lens, starts, 1.0)
    dev = kv.to("tpu")
    with pytest.raises(IndexError, match="slot"):
        torch.ops.tpu.write_kv_cache_(dev, torch.zeros(1, 2, 8, device="tpu"),
                                      torch.zeros(1, 2, 8, device="tpu"),
                                      torch.tensor([10_000], device="tpu"))
        dev.cpu()
    assert torch.equal(dev.cpu(), kv)  # the failed write left the cache as it was

"""Bounded dynamic sizes in torch.compile(backend="tpu"): a symbolic size runs padded
to a bucket, and the padded program gives the unpadded answer for every op family
that reduces over, sorts along, contracts or indexes a dynamic dim (vs the CPU);
mark_dynamic bounds; the bucket policy; programs counted per bucket, not per size;
a BERT-style encoder from a Transformers config over varied lengths."""
import pytest
import torch
import torch.nn.functional as F

import torch_tpu
from torch_tpu.dynamo import bucketed_graph
from torch_tpu.dynamo.buckets import bucket_for, normalize

TOL = dict(rtol=1e-4, atol=1e-5)
SIZES = (3, 6, 5)  # buckets 4 and 8; 5 reuses the 8-program


@pytest.fixture(autouse=True)
def fresh_stats():
    bucketed_graph.reset_stats()
    prev = torch_tpu.set_dynamic_buckets("pow2")
    yield
    torch_tpu.set_dynamic_buckets(prev)


def _data(n, seed, batch=2, hidden=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n, hidden, generator=g)
    x[0, 0, 0] = float("inf") if n > 2 else x[0, 0, 0]  # specials at real positions stay exact
    return x


def _check(f, make_inputs, sizes=SIZES, tol=TOL, bucketed=True):
    """f compiled with dynamic=True over the sizes, each result vs the CPU."""
    bucketed_graph.reset_stats()
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    with torch.no_grad():
        for i, n in enumerate(sizes):
            inputs = make_inputs(n, i)
            ref = f(*inputs)
            out = compiled(*[t.to("tpu") for t in inputs])
            if isinstance(ref, torch.Tensor):
                ref, out = (ref,), (out,)
            for r, o in zip(ref, out):
                assert o.shape == r.shape
                torch.testing.assert_close(o.cpu(), r, **tol, equal_nan=True)
    s = torch_tpu.debug.dynamic_shapes()
    if bucketed:
        assert s["per_size_calls"] == 0, s["per_size_reasons"]
        assert s["padded_calls"] == len(sizes)
        assert s["bucket_programs"] == len({bucket_for(n, "pow2") for n in sizes})
    return s


def _pos(n, i):  # positive values: 1 / x is finite at real positions, inf in the padding
    return (_data(n, i).abs() + 0.5,)


@pytest.mark.parametrize("name,f", [
    ("sum", lambda x: (1 / x).sum(1)),
    ("mean", lambda x: (1 / x).mean(1)),
    ("amax", lambda x: (-1 / x).amax(1)),
    ("min_dim", lambda x: torch.min(-x.log(), 1)),
    ("var", lambda x: torch.var((1 / x), 1)),
    ("std_all", lambda x: torch.std(x)),
    ("prod", lambda x: x.prod(1)),
    ("argmax", lambda x: (-1 / x).argmax(1)),
    ("argmin", lambda x: x.log().argmin(1)),
])
def test_reductions_over_a_dynamic_dim(name, f):
    _check(f, _pos)


def test_softmax_and_log_softmax_along_a_dynamic_dim():
    _check(lambda x: (x.log().softmax(1), F.log_softmax(x.log(), 1)), _pos)


def test_layer_norm_over_static_dims_with_dynamic_rows():
    w, b = torch.randn(4), torch.randn(4)

    def f(x, w, b):
        return F.layer_norm(x, (4,), w, b).sum(1)
    _check(f, lambda n, i: (_data(n, i), w, b))


def test_cumsum_and_cumprod_along_a_dynamic_dim():
    _check(lambda x: (x.cumsum(1), (x / 2).cumprod(1)), lambda n, i: (_data(n, i),))


def test_sort_along_a_dynamic_dim_with_nan_and_infinities():
    def make(n, i):
        x = _data(n, i)
        x[1, 0, 1] = float("nan")
        x[1, n - 1, 2] = -float("inf")
        return (x,)
    _check(lambda x: torch.sort(x, 1), make)
    _check(lambda x: torch.sort(x, dim=1, descending=True, stable=True), make)


def test_topk_along_a_dynamic_dim():
    _check(lambda x: torch.topk(x, 2, dim=1), lambda n, i: (_data(n, i),))
    _check(lambda x: torch.topk(x, 2, dim=1, largest=False), lambda n, i: (_data(n, i),))


def test_topk_beyond_the_real_size_raises():
    compiled = torch.compile(lambda x: torch.topk(x, 3, dim=1), backend="tpu", dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(2, 5, 4).to("tpu"))
        compiled(torch.randn(2, 6, 4).to("tpu"))  # padded to 8
        with pytest.raises((IndexError, RuntimeError), match="range"):
            compiled(torch.randn(2, 2, 4).to("tpu"))  # pads to 2, but a real run rejects k=3 too


def test_embedding_and_gather_with_dynamic_index_tensors():
    table = torch.randn(10, 4)

    def f(ids, table):
        e = F.embedding(ids, table)
        g = torch.gather(table, 0, ids.view(-1, 1).expand(-1, 4).clamp(max=9))
        return e.sum(1), g.sum(0)
    _check(f, lambda n, i: (torch.randint(0, 10, (2, n)), table))


def test_index_into_a_dynamic_dim_and_select_from_the_end():
    def f(x):
        pos = torch.arange(x.shape[1], device=x.device)
        return x.transpose(0, 1)[pos // 2].sum(2), x[:, -1], x[:, 0]
    _check(f, lambda n, i: (_data(n, i),))


def test_a_size_used_as_a_value_is_the_real_size():
    # a pointwise op given x.shape[1] gets the real size, a runtime value
    _check(lambda x: x.sum(1) / x.shape[1] + (torch.arange(x.shape[1], device=x.device) % x.shape[1]).sum(),
           lambda n, i: (_data(n, i, batch=3),))


def test_a_size_used_as_a_value_that_cannot_be_computed_at_run_time_runs_exact():
    # sqrt(x.shape[1]) (a SymFloat) would be the bucket's in a padded program: that
    # symbol runs exact (one program per size), the batch symbol keeps its buckets
    s = _check(lambda x: x.sum(1) * x.shape[1] ** 0.5, lambda n, i: (_data(n, i, batch=3),), bucketed=False)
    assert s["per_size_calls"] == 0 and s["padded_calls"] == len(SIZES)
    assert s["bucket_programs"] == len(set(SIZES))
    assert any("as a value" in r for r in s["per_size_reasons"])


def test_matmul_contracting_over_a_dynamic_dim():
    # inf in the padding of one operand: zeroing only the other one would give NaN
    _check(lambda x, y: (1 / x).transpose(1, 2) @ y, lambda n, i: (_pos(n, i)[0], _data(n, i + 7)))


def test_attention_with_a_padding_mask():
    def f(q, k, v, keep):
        mask = keep[:, None, None, :].bool()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    def make(n, i):
        g = torch.Generator().manual_seed(i)
        q, k, v = (torch.randn(2, 2, n, 8, generator=g) for _ in range(3))
        keep = torch.ones(2, n, dtype=torch.long)
        keep[1, n // 2 + 1:] = 0
        return q, k, v, keep
    _check(f, make)


def test_mean_pooling_with_a_dynamic_batch():
    # batch 3 runs in the 4-bucket: padded rows are sliced off the result
    _check(lambda x: x.mean(1) + x.sum(0, keepdim=True).mean(1),
           lambda n, i: (_data(n, i, batch=3),))


def test_cat_along_a_dynamic_dim():
    # both pieces padded: the second piece's real part moves right after the
    # first's; only the last padded: the plain cat; cumsum and softmax then see
    # exactly the unpadded sequence
    def f(x, y):
        both = torch.cat([x, 2 * y], 1)
        last = torch.cat([x[:, :1] - 1, y], 1)
        return both.cumsum(1), both.softmax(1), last.sum(1), last.cumsum(1)
    _check(f, lambda n, i: (_data(n, i), _data(n + 2, i + 3)))


def test_slices_whose_extent_is_a_size_expression():
    # GPT-2's position-id code: a cat of size s + 1 sliced back to s twice; and
    # x[:, :-1] (real extent s - 1)
    def f(x):
        c = torch.cat([x[:, :1] - 1, x], 1)
        shifted = c[:, 1:x.shape[1] + 1] - c[:, :x.shape[1]]
        return shifted.cumsum(1), x[:, :-1].sum(1), x[:, :-1].amax(1)
    _check(f, lambda n, i: (_data(n + 1, i),))


def test_split_along_a_static_dim_of_a_padded_value():
    def f(x):
        a, b = x.split(2, dim=2)
        c = torch.unbind(x, 2)[3]
        return (a.softmax(1) * b).sum(1), c.cumsum(1)
    _check(f, lambda n, i: (_data(n, i),))


def test_reading_a_sliced_output_compiles_no_program_per_size():
    # the result of a padded program is sliced back to the real batch (a view);
    # reading it slices on the host, so sizes of one bucket add no program
    lin = torch.nn.Linear(4, 3)
    lin_tpu = torch.nn.Linear(4, 3).to("tpu")
    lin_tpu.load_state_dict(lin.state_dict())
    compiled = torch.compile(lambda x: lin_tpu(x).softmax(-1), backend="tpu", dynamic=True)
    with torch.no_grad():
        x = torch.randn(5, 4)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), lin(x).softmax(-1), **TOL)
        before = torch_tpu.debug.metrics()["programs_compiled"]
        for n in (6, 7, 8):
            x = torch.randn(n, 4)
            torch.testing.assert_close(compiled(x.to("tpu")).cpu(), lin(x).softmax(-1), **TOL)
        assert torch_tpu.debug.metrics()["programs_compiled"] == before
        # a view that is a small part of a large storage is still read on the device
        big = torch.arange(1 << 20, dtype=torch.float32).to("tpu")
        assert big[10:13].cpu().tolist() == [10.0, 11.0, 12.0]
        assert big.view(1024, 1024)[:, 5].cpu()[:3].tolist() == [5.0, 1029.0, 2053.0]


def _gpt2(layers=1):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=100, n_embd=32, n_layer=layers, n_head=4, n_positions=64)
    return GPT2LMHeadModel(cfg).eval()


def test_gpt2_decoder_prefill_runs_on_buckets():
    # GPT-2's prefill graph has a CPU prologue (its GELU constant) and a cat along
    # the padded sequence dim (position ids); both run padded, equal to per size
    ref = _gpt2()
    model = _gpt2().to("tpu")

    def prefill(ids):
        return model(input_ids=ids, use_cache=False).logits[:, -1]
    compiled = torch.compile(prefill, backend="tpu", dynamic=True)
    per_size = torch.compile(prefill, backend="tpu", dynamic=True, options={"dynamic_buckets": False})
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n in (3, 6, 5, 7):
            ids = torch.randint(0, 100, (2, n), generator=g)
            out = compiled(ids.to("tpu")).cpu()
            torch.testing.assert_close(out, ref(input_ids=ids, use_cache=False).logits[:, -1], **TOL)
            torch.testing.assert_close(out, per_size(ids.to("tpu")).cpu(), **TOL)
    s = torch_tpu.debug.dynamic_shapes()
    assert s["padded_calls"] == 4 and s["bucket_programs"] == 2, s["per_size_reasons"]


def test_ops_without_a_padding_rule_run_per_size():
    # a flip along a padded dim would move the padding in front: no rule, per size
    s = _check(lambda x: x.flip(1).cumsum(1), lambda n, i: (_data(n, i),), bucketed=False)
    assert s["per_size_calls"] == len(SIZES) and s["per_size_graphs"] == 1
    assert any("flip" in r for r in s["per_size_reasons"])


def test_gather_along_a_dynamic_dim_checks_indices_against_the_real_size():
    def f(x, idx):
        return torch.gather(x, 1, idx)
    _check(f, lambda n, i: (_data(n, i), torch.randint(0, n, (2, 2, 4))))
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    x = torch.randn(2, 5, 4)
    compiled(x.to("tpu"), torch.zeros(2, 2, 4, dtype=torch.long).to("tpu"))
    bad = torch.full((2, 2, 4), 6, dtype=torch.long)  # inside the 8-bucket's padding
    with pytest.raises(IndexError, match="out of range"):
        compiled(x.to("tpu"), bad.to("tpu"))


def test_data_dependent_sizes_keep_working():
    def f(x):
        return x[x > 0].sum() + torch.nonzero(x).shape[0]
    compiled = torch.compile(f, backend="tpu", dynamic=True)
    for n in (3, 6):
        x = torch.randn(2, n)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), f(x), **TOL)


def test_mark_dynamic_bounds_buckets_and_errors_beyond_max():
    f = lambda x: x.softmax(-1).sum(0)  # noqa: E731
    compiled = torch.compile(f, backend="tpu")
    with torch.no_grad():
        for n in (5, 40, 48):
            x = torch.randn(3, n)
            xt = x.to("tpu")
            torch._dynamo.mark_dynamic(xt, 1, min=2, max=48)
            torch.testing.assert_close(compiled(xt).cpu(), f(x), **TOL)
        # 40 and 48 share the program capped at the bound (48, not 64)
        assert torch_tpu.debug.dynamic_shapes()["bucket_programs"] == 2
        xt = torch.randn(3, 60).to("tpu")
        torch._dynamo.mark_dynamic(xt, 1, min=2, max=48)
        with pytest.raises(Exception, match=r"not in range \[2, 48\]"):
            compiled(xt)


def test_user_buckets_and_the_backend_option():
    assert normalize([16, 4, 4]) == (4, 16)
    assert bucket_for(5, (4, 16)) == 16 and bucket_for(17, (4, 16)) == 32
    assert bucket_for(40, "pow2", upper=48) == 48
    with pytest.raises(ValueError):
        torch_tpu.set_dynamic_buckets([0, 4])
    f = lambda x: x.sum(1)  # noqa: E731
    torch_tpu.set_dynamic_buckets([7, 12])
    _check(f, lambda n, i: (_data(n, i),), sizes=(3, 6, 9), bucketed=False)
    assert torch_tpu.debug.dynamic_shapes()["bucket_programs"] == 2  # 7 and 12
    torch._dynamo.reset()
    bucketed_graph.reset_stats()
    compiled = torch.compile(f, backend="tpu", dynamic=True, options={"dynamic_buckets": False})
    with torch.no_grad():
        for n in (3, 6):
            compiled(torch.randn(2, n, 4).to("tpu"))
    s = torch_tpu.debug.dynamic_shapes()
    assert s["bucketed_graphs"] == 0 and s["padded_calls"] == 0
    with pytest.raises(Exception, match="unknown options"):
        torch.compile(f, backend="tpu", options={"bucket": 1})(torch.randn(2, 3).to("tpu"))


def _bert(layers=2):
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers,
                     num_attention_heads=4, intermediate_size=64,
                     max_position_embeddings=512, num_labels=3)
    return BertForSequenceClassification(cfg).eval()


def _bert_over(lengths, batch=2):
    ref = _bert()
    model = _bert()
    model.load_state_dict(ref.state_dict())
    compiled = torch.compile(model.to("tpu"), backend="tpu", dynamic=True)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n in lengths:
            ids = torch.randint(0, 100, (batch, n), generator=g)
            keep = torch.ones(batch, n, dtype=torch.long)
            keep[-1, n // 2 + 1:] = 0  # a padded sequence in every batch
            out = compiled(input_ids=ids.to("tpu"), attention_mask=keep.to("tpu")).logits
            torch.testing.assert_close(out.cpu(), ref(input_ids=ids, attention_mask=keep).logits,
                                       rtol=1e-4, atol=1e-4)
    return torch_tpu.debug.dynamic_shapes()


def test_bert_encoder_over_varied_lengths_smoke():
    s = _bert_over([3, 6, 5])
    assert s["per_size_calls"] == 0, s["per_size_reasons"]
    assert s["bucket_programs"] == 2
    (graph,) = torch_tpu.debug.compiled_graphs()  # one record for the graph's programs
    assert graph["calls"] == 3 and graph["compiles"] + graph["cache_hits"] == 3


@pytest.mark.slow
def test_bert_encoder_lengths_1_to_512_compile_at_most_10_programs():
    before = torch_tpu.debug.metrics()["programs_compiled"]
    lengths = [2, 3, 7, 16, 17, 33, 100, 129, 200, 257, 300, 511, 512, 64, 5, 1]
    s = _bert_over(lengths)
    assert s["per_size_calls"] <= 1, s["per_size_reasons"]  # length 1: Dynamo specialises it
    programs = torch_tpu.debug.metrics()["programs_compiled"] - before
    assert s["bucket_programs"] <= 10 and programs <= 10 + 1


def test_buckets_in_defer_and_fuse_with_pending_inputs():
    torch_tpu.set_execution_mode("defer_and_fuse")

    def make(n, i):
        return (_data(n, i),)
    compiled = torch.compile(lambda x: (x * 2).softmax(1).sum(1), backend="tpu", dynamic=True)
    with torch.no_grad():
        for i, n in enumerate(SIZES):
            (x,) = make(n, i)
            pending = x.to("tpu") + 1  # recorded, not yet run, when the graph pads it
            torch.testing.assert_close(compiled(pending).cpu(), ((x + 1) * 2).softmax(1).sum(1),
                                       equal_nan=True, **TOL)
    assert torch_tpu.debug.dynamic_shapes()["padded_calls"] == len(SIZES)


def _train_check(f, build, make, bucketed=True):
    ref, mod = build(), build().to("tpu")
    compiled = torch.compile(lambda *a: f(mod, *a), backend="tpu", dynamic=True)
    for i, n in enumerate(SIZES):
        inputs = make(n, i)
        ref.zero_grad()
        mod.zero_grad()
        loss_ref = f(ref, *inputs)
        loss_ref.backward()
        loss = compiled(*[t.to("tpu") for t in inputs])
        loss.backward()
        torch.testing.assert_close(loss.cpu(), loss_ref, **TOL)
        for (name, p), p_ref in zip(mod.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad.cpu(), p_ref.grad, **TOL, msg=name)
    s = torch_tpu.debug.dynamic_shapes()
    if bucketed:
        assert s["per_size_calls"] == 0, s["per_size_reasons"]
        # forward and backward, each one program per bucket (4 and 8)
        assert s["bucketed_graphs"] == 2 and s["bucket_programs"] == 4
    return s


def _small_model():
    torch.manual_seed(0)
    return torch.nn.ModuleDict(dict(emb=torch.nn.Embedding(50, 8), ln=torch.nn.LayerNorm(8),
                                    lin=torch.nn.Linear(8, 8)))


def test_training_forward_and_backward_on_buckets():
    # embedding, layer norm, softmax along the padded dim, matmuls contracting over
    # it, gelu, a mean over it (its backward divides by the real size): the loss
    # and every gradient equal the CPU's
    def f(m, ids):
        h = m["ln"](m["emb"](ids))
        a = (h @ h.t()).softmax(-1) @ h
        return F.gelu(m["lin"](a)).mean(0).pow(2).sum()
    _train_check(f, _small_model, lambda n, i: (torch.randint(0, 50, (n,)),))


def test_training_with_a_flattened_padded_dim_runs_per_size():
    # a linear layer on (batch, length, hidden) saves a (batch * length, hidden)
    # view for its backward: that crosses the graph boundary, so both run per size
    def f(m, ids):
        return F.gelu(m["lin"](m["ln"](m["emb"](ids)))).mean(1).pow(2).sum()
    s = _train_check(f, _small_model, lambda n, i: (torch.randint(0, 50, (2, n)),), bucketed=False)
    assert any("training graph" in r for r in s["per_size_reasons"]), s["per_size_reasons"]

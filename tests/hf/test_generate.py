"""generate() on tpu against the CPU: greedy, beam search, sampling (top-k / top-p /
temperature, reproducible with torch.manual_seed), dynamic and static KV cache (the
static one is compiled by Transformers with backend="tpu"), batched prompts with left
padding and attention masks; Strict Eager and Defer & Fuse."""
import pytest
import torch
import torch_tpu
import transformers

CFG = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
           pad_token_id=0, bos_token_id=1, eos_token_id=2)
NEW = 6


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    cpu = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG)).eval()
    tpu = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG)).eval()
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu.to("tpu")


def _batch():
    """Two prompts, the first left-padded by two tokens."""
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 64, (2, 6), generator=g)
    mask = torch.ones_like(ids)
    ids[0, :2], mask[0, :2] = 0, 0
    return ids, mask


def _generate(model, device, **kw):
    ids, mask = _batch()
    with torch.no_grad():
        return model.generate(input_ids=ids.to(device), attention_mask=mask.to(device),
                              max_new_tokens=NEW, eos_token_id=None, **kw)


@pytest.fixture(params=["strict_eager", "defer_and_fuse"])
def mode(request):
    torch_tpu.set_execution_mode(request.param)
    yield request.param
    torch_tpu.set_execution_mode("strict_eager")


@pytest.mark.parametrize("strategy", [dict(do_sample=False),
                                      pytest.param(dict(do_sample=False, num_beams=3), marks=pytest.mark.slow)],
                         ids=["greedy", "beam"])
def test_generate_matches_cpu(models, mode, strategy):
    cpu, tpu = models
    want = _generate(cpu, "cpu", **strategy)
    got = _generate(tpu, "tpu", **strategy)
    assert got.device.type == "tpu" and got.shape == (2, 6 + NEW)
    assert torch.equal(got.cpu(), want)


@pytest.mark.slow
def test_generate_scores_match_cpu(models, mode):
    """The processed scores of each greedy step (left-padded batch) equal the CPU's."""
    cpu, tpu = models
    want = _generate(cpu, "cpu", do_sample=False, output_scores=True, return_dict_in_generate=True)
    got = _generate(tpu, "tpu", do_sample=False, output_scores=True, return_dict_in_generate=True)
    for g, w in zip(got.scores, want.scores, strict=True):
        torch.testing.assert_close(g.cpu(), w, rtol=1e-4, atol=1e-5)


def test_sampling_is_reproducible_and_respects_top_k(models):
    _, tpu = models
    kw = dict(do_sample=True, top_k=5, top_p=0.9, temperature=0.7)
    torch.manual_seed(11)
    a = _generate(tpu, "tpu", **kw)
    torch.manual_seed(11)
    b = _generate(tpu, "tpu", **kw)
    assert torch.equal(a.cpu(), b.cpu())
    torch.manual_seed(12)
    draws = [_generate(tpu, "tpu", **kw).cpu() for _ in range(3)]
    assert any(not torch.equal(d, a.cpu()) for d in draws), "different seeds draw different tokens"
    # top_k=1 leaves one candidate: sampling must then give the greedy tokens.
    assert torch.equal(_generate(tpu, "tpu", do_sample=True, top_k=1).cpu(),
                       _generate(tpu, "tpu", do_sample=False).cpu())


def test_sampled_tokens_are_within_cpu_top_k(models):
    """Every sampled token is one of the CPU model's top-k tokens after its prefix."""
    cpu, tpu = models
    ids, mask = _batch()
    torch.manual_seed(5)
    out = _generate(tpu, "tpu", do_sample=True, top_k=4, temperature=1.3).cpu()
    with torch.no_grad():
        logits = cpu(input_ids=out, attention_mask=torch.cat([mask, torch.ones(2, NEW, dtype=mask.dtype)], 1)).logits
    for step in range(NEW):
        pos = ids.shape[1] + step
        top = logits[:, pos - 1].topk(4).indices
        assert all(out[i, pos] in top[i] for i in range(2))


def test_static_cache_generate_is_compiled_once_and_matches_cpu(models):
    """cache_implementation="static": Transformers compiles the decoding step with
    backend="tpu" (dynamic=False). After the first two decoded tokens Dynamo compiles
    nothing more: one graph serves every later token."""
    cpu, tpu = models
    torch._dynamo.reset()
    graphs = []

    class Record(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
            return scores

    want = _generate(cpu, "cpu", do_sample=False, cache_implementation="static")
    got = _generate(tpu, "tpu", do_sample=False, cache_implementation="static",
                    logits_processor=[Record()])
    assert torch.equal(got.cpu(), want)
    assert len(graphs) == NEW and graphs[1] >= 1
    assert graphs[2:] == [graphs[1]] * (NEW - 2), graphs


def test_static_cache_generate_compiles_nothing_after_the_second_token(models):
    """Strict Eager: the eager loop around the compiled decoding step grows input_ids a
    column a token; its tiny integer ops run on the host tier (csrc/aten/host_tier.h)
    once their shapes keep changing, so no XLA program compiles after the second
    decoded token, and the tokens are the CPU's."""
    cpu, tpu = models
    torch._dynamo.reset()
    torch_tpu.debug.clear_program_cache()
    compiled = []

    class Record(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            compiled.append(torch_tpu.debug.metrics()["programs_compiled"])
            return scores

    want = _generate(cpu, "cpu", do_sample=False, cache_implementation="static")
    # Without pipelined compilation: a cold op recorded behind pending pipelined ops is
    # compiled, not offered to the host tier, so with it the loop compiles 4 more
    # programs over tokens 3-4 (80, 95, 98, 99, 99, 99): a known cost of the pipeline.
    with torch_tpu.debug.pipelined_compile(False):
        got = _generate(tpu, "tpu", do_sample=False, cache_implementation="static",
                        logits_processor=[Record()])
    assert torch.equal(got.cpu(), want)
    assert compiled[2:] == [compiled[1]] * (NEW - 2), compiled


def test_defer_and_fuse_static_cache_generate_compiles_nothing_after_the_second_token(models):
    """Defer & Fuse: each token's pending trace of the eager loop has new shapes, so its
    fused key would miss every token. Such a trace runs node by node instead
    (csrc/aten/trace_by_node.h): its tiny integer nodes and its value-moving float
    nodes (argmax over the last logits, copy_) on the host, the others through their
    single-op programs. The growing cat was seen in the prefill's trace with one
    column less, so even the loop's first flush of a trace runs node by node: after
    the second token nothing compiles, the last step included (where the inputs reach
    the static cache's length and the loop records a different trace). Tokens are
    the CPU's."""
    cpu, tpu = models
    torch._dynamo.reset()
    torch_tpu.debug.clear_program_cache()
    torch_tpu._C._clear_fused_cache()
    compiled, by_node = [], []

    class Record(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            m = torch_tpu.debug.metrics()
            compiled.append(m["programs_compiled"])
            by_node.append(m["fused_graphs_run_by_node"])
            return scores

    ids, mask = _batch()
    new = 12
    kw = dict(max_new_tokens=new, eos_token_id=None, do_sample=False, cache_implementation="static")
    with torch.no_grad():
        want = cpu.generate(input_ids=ids, attention_mask=mask, **kw)
        torch_tpu.set_execution_mode("defer_and_fuse")
        try:
            got = tpu.generate(input_ids=ids.to("tpu"), attention_mask=mask.to("tpu"),
                               logits_processor=[Record()], **kw)
        finally:
            torch_tpu.set_execution_mode("strict_eager")
    assert torch.equal(got.cpu(), want)
    assert len(compiled) == new
    assert compiled[1:] == [compiled[1]] * (new - 1), compiled
    assert by_node[-1] - by_node[1] >= 2 * (new - 2), by_node  # two traces a token


def test_compiled_static_cache_sampling_is_reproducible(models):
    """Sampling through the compiled (backend="tpu") static-cache decoding step, on the
    left-padded batch: the same torch.manual_seed gives the same tokens, and top_k=1
    gives the CPU's greedy tokens."""
    cpu, tpu = models
    kw = dict(do_sample=True, top_k=5, top_p=0.9, temperature=0.7, cache_implementation="static")
    torch.manual_seed(11)
    a = _generate(tpu, "tpu", **kw)
    torch.manual_seed(11)
    b = _generate(tpu, "tpu", **kw)
    assert torch.equal(a.cpu(), b.cpu())
    greedy = _generate(cpu, "cpu", do_sample=False)
    assert torch.equal(_generate(tpu, "tpu", do_sample=True, top_k=1,
                                 cache_implementation="static").cpu(), greedy)


def test_compiled_static_cache_beam_search_matches_cpu(models):
    """Beam search (3 beams) with the static cache, the decoding step compiled with
    backend="tpu", on the left-padded batch: the CPU's tokens."""
    cpu, tpu = models
    kw = dict(do_sample=False, num_beams=3, cache_implementation="static")
    assert torch.equal(_generate(tpu, "tpu", **kw).cpu(), _generate(cpu, "cpu", **kw))

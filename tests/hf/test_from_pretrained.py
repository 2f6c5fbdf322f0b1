"""from_pretrained from safetensors written by save_pretrained, straight onto tpu:
device_map="tpu" with a dtype, sharded checkpoints, and device_map="auto" on a tpu host.
(The loader copies weights on a thread pool.)"""
import copy

import pytest
import torch
import transformers

CFG = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG)).eval()
    single, sharded = tmp_path_factory.mktemp("single"), tmp_path_factory.mktemp("sharded")
    model.save_pretrained(single)
    model.save_pretrained(sharded, max_shard_size="20KB")
    return model, single, sharded


def _check_loaded(loaded, ref, dtype):
    assert {p.device.type for p in loaded.parameters()} == {"tpu"}
    assert {p.dtype for p in loaded.parameters()} == {dtype}
    ref_state = ref.state_dict()
    for k, v in loaded.state_dict().items():
        assert torch.equal(v.cpu(), ref_state[k].to(dtype)), k
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        want = copy.deepcopy(ref).to(dtype)(ids).logits
        got = loaded(ids.to("tpu")).logits
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got.cpu(), want, **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_from_pretrained_device_map_tpu(saved, dtype):
    ref, single, _ = saved
    loaded = transformers.LlamaForCausalLM.from_pretrained(single, device_map="tpu", dtype=dtype)
    _check_loaded(loaded, ref, dtype)


def test_from_pretrained_sharded_checkpoint(saved):
    ref, _, sharded = saved
    assert len(list(sharded.glob("model-*.safetensors"))) > 1
    assert (sharded / "model.safetensors.index.json").is_file()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(sharded, device_map="tpu",
                                                               dtype=torch.float32)
    _check_loaded(loaded, ref, torch.float32)


def test_from_pretrained_device_map_auto_places_on_tpu(saved):
    """Accelerate 1.15's get_max_memory enumerates cuda/xpu/npu/... devices but not tpu,
    so "auto" needs the tpu's budget named: integer device 0 is the current accelerator."""
    ref, _, sharded = saved
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        sharded, device_map="auto", max_memory={0: "1GiB", "cpu": "1GiB"}, dtype=torch.float32)
    # (_check_loaded asserts every parameter landed on tpu, none on the CPU or disk.)
    _check_loaded(loaded, ref, torch.float32)


def test_device_map_auto_with_the_tpu_budget_helper(saved):
    """torch_tpu.integrations.accelerate.max_memory() names each tpu's free memory under
    its index (what Accelerate cannot find by itself): "auto" then puts the whole model
    on tpu, as it would on one cuda device."""
    from torch_tpu.integrations.accelerate import max_memory
    budget = max_memory()
    assert set(budget) == {0, "cpu"} and budget[0] == torch.tpu.mem_get_info(0)[0] > 0
    ref, single, _ = saved
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        single, device_map="auto", max_memory=budget, dtype=torch.float32)
    _check_loaded(loaded, ref, torch.float32)


def test_device_map_auto_splits_between_tpu_and_cpu(saved):
    """A tpu budget smaller than the model: Accelerate keeps the first layers on tpu, the
    rest offloaded to the CPU (their parameters wait on the meta device) and moved in
    for each forward; the logits still match."""
    ref, single, _ = saved
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        single, device_map="auto", max_memory={0: "90KB", "cpu": "1GiB"}, dtype=torch.float32)
    placed = {n: p.device.type for n, p in loaded.named_parameters()}
    assert placed["model.embed_tokens.weight"] == "tpu", placed
    assert "tpu" in placed.values() and set(placed.values()) != {"tpu"}, placed
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        want = ref(ids).logits
        got = loaded(ids.to("tpu")).logits
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


def test_device_map_auto_without_a_budget_stays_on_cpu(saved):
    """Documents Accelerate 1.15's limit the helper exists for: with no max_memory it sees
    no tpu and maps everything to the CPU."""
    _, single, _ = saved
    loaded = transformers.AutoModelForCausalLM.from_pretrained(single, device_map="auto",
                                                               dtype=torch.float32)
    assert {p.device.type for p in loaded.parameters()} == {"cpu"}

"""Transformers' attn_implementation="flex_attention" on tpu after
torch_tpu.integrations.flex_attention.enable() (docs/flex_attention.md): Transformers
refuses flex attention on a tpu host by name, and the opt-in lets it through and puts
the refusal back on disable(). Reference: the same model on PyTorch's CPU with SDPA
(the CPU's flex_attention has no backward)."""
import copy

import pytest
import torch

import torch_tpu  # noqa: F401
import torch_tpu.integrations.flex_attention as tpu_flex
from conftest import assert_close_cpu

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.utils import import_utils  # noqa: E402


def _config():
    return LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                       max_position_embeddings=64)


@pytest.fixture
def enabled():
    tpu_flex.enable()
    yield
    tpu_flex.disable()


def test_transformers_refuses_flex_on_tpu_without_the_opt_in():
    assert not tpu_flex.is_enabled()
    if import_utils.is_torch_flex_attn_available():
        pytest.skip("this Transformers release does not refuse flex attention on tpu")
    with pytest.raises(ImportError):
        LlamaForCausalLM._from_config(_config(), attn_implementation="flex_attention")


def test_llama_flex_attention_forward_backward_matches_cpu_sdpa(enabled):
    torch.manual_seed(0)
    ref = LlamaForCausalLM._from_config(copy.deepcopy(_config()), attn_implementation="sdpa")
    model = LlamaForCausalLM._from_config(copy.deepcopy(_config()),
                                          attn_implementation="flex_attention")
    assert model.config._attn_implementation == "flex_attention"
    model.load_state_dict(ref.state_dict())
    model.to("tpu")
    ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    got = model(ids.to("tpu"), labels=ids.to("tpu"))
    got.loss.backward()
    want = ref(ids, labels=ids)
    want.loss.backward()
    assert_close_cpu(got.logits, want.logits, rtol=1e-4, atol=2e-5)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert_close_cpu(p.grad, q.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_disable_puts_transformers_refusal_back():
    from transformers import masking_utils
    before = (import_utils.is_torch_flex_attn_available, masking_utils.BlockMask)
    tpu_flex.enable()
    try:
        assert masking_utils.is_torch_flex_attn_available()
    finally:
        tpu_flex.disable()
    assert (import_utils.is_torch_flex_attn_available, masking_utils.BlockMask) == before

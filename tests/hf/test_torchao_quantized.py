"""Transformers' TorchAoConfig on tpu: from_pretrained(..., quantization_config=
TorchAoConfig(config), device_map="tpu") quantises a tiny random Llama while loading,
generate() runs on tpu with no CPU fallback and gives the CPU-loaded quantised model's
logits; save_pretrained of the quantised model reloads onto tpu."""
import pytest
import torch
import transformers

import torch_tpu

pytest.importorskip("torchao")
from torchao.quantization import Int8WeightOnlyConfig  # noqa: E402

from torch_tpu.quantization import TpuInt4WeightOnlyConfig  # noqa: E402

CFG = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG)).save_pretrained(path)
    return path


def load(path, config, device):
    return transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, device_map=device,
        quantization_config=transformers.TorchAoConfig(config)).eval()


@pytest.mark.slow
@pytest.mark.parametrize("make_config", [Int8WeightOnlyConfig, lambda: TpuInt4WeightOnlyConfig(32)],
                         ids=["int8_weight_only", "int4_weight_only"])
def test_from_pretrained_quantized_generate(saved, make_config):
    before = dict(torch_tpu.debug.metrics()["cpu_fallback_counts"])
    got = load(saved, make_config(), "tpu")
    ref = load(saved, make_config(), "cpu")
    q = got.model.layers[0].mlp.up_proj.weight
    assert q.device.type == "tpu" and type(q).__name__ in ("Int8Tensor", "Int4PackedTensor")
    ids = torch.randint(2, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        out = got.generate(ids.to("tpu"), **kw).cpu()
        torch.testing.assert_close(got(out.to("tpu")).logits.cpu(), ref(out).logits,
                                   rtol=1e-4, atol=1e-4)
    after = torch_tpu.debug.metrics()["cpu_fallback_counts"]
    assert {k: v for k, v in after.items() if v != before.get(k, 0)} == {}
    assert out.shape == (1, 14)


@pytest.mark.slow
def test_save_and_reload_int8_weight_only(saved, tmp_path):
    model = load(saved, Int8WeightOnlyConfig(), "tpu")
    ids = torch.randint(2, 128, (1, 8), generator=torch.Generator().manual_seed(1)).to("tpu")
    with torch.no_grad():
        want = model(ids).logits.cpu()
    model.save_pretrained(tmp_path)
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, device_map="tpu").eval()
    q = back.model.layers[0].mlp.up_proj.weight
    assert q.device.type == "tpu" and type(q).__name__ == "Int8Tensor"
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits.cpu(), want, rtol=0, atol=0)

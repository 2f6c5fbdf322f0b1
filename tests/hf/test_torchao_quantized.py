"""Transformers' TorchAoConfig on tpu: from_pretrained(..., quantization_config=
TorchAoConfig(config), device_map="tpu") quantises a tiny random Llama while loading,
generate() runs on tpu with no CPU fallback and gives the CPU-loaded quantised model's
logits; save_pretrained of the quantised model reloads onto tpu with the same outputs:
int8 through TorchAoConfig, int4 and float8 (torch_tpu's tensors, which torchao's
safetensors support refuses) through torch_tpu.quantization.hf.TpuTorchAoConfig, also
in a fresh process."""
import pytest
import torch
import transformers

import torch_tpu
from conftest import run_python

pytest.importorskip("torchao")
from torchao.quantization import Int8WeightOnlyConfig  # noqa: E402

from torch_tpu.quantization import (  # noqa: E402
    TpuFloat8DynamicActivationFloat8WeightConfig, TpuInt4WeightOnlyConfig)
from torch_tpu.quantization.hf import TpuTorchAoConfig  # noqa: E402

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


SAVE_CASES = {
    "int8_weight_only": (transformers.TorchAoConfig, Int8WeightOnlyConfig, "Int8Tensor"),
    "int4_weight_only": (TpuTorchAoConfig, lambda: TpuInt4WeightOnlyConfig(32), "Int4PackedTensor"),
    "float8": (TpuTorchAoConfig, TpuFloat8DynamicActivationFloat8WeightConfig, "Float8Tensor"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SAVE_CASES))
def test_save_and_reload(saved, tmp_path, case):
    wrap, make_config, tensor = SAVE_CASES[case]
    model = transformers.AutoModelForCausalLM.from_pretrained(
        saved, dtype=torch.float32, device_map="tpu", quantization_config=wrap(make_config())).eval()
    ids = torch.randint(2, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids.to("tpu")).logits.cpu()
    model.save_pretrained(tmp_path)
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, device_map="tpu").eval()
    q = back.model.layers[0].mlp.up_proj.weight
    assert q.device.type == "tpu" and type(q).__name__ == tensor
    with torch.no_grad():
        torch.testing.assert_close(back(ids.to("tpu")).logits.cpu(), want, rtol=0, atol=0)
    if wrap is TpuTorchAoConfig:
        # A fresh process: importing torch_tpu.quantization.hf is all a reload needs.
        torch.save(want, tmp_path / "want.pt")
        r = run_python(f"""
            import torch, transformers, torch_tpu
            import torch_tpu.quantization.hf
            m = transformers.AutoModelForCausalLM.from_pretrained({str(tmp_path)!r}, device_map="tpu")
            ids = torch.randint(2, 128, (1, 8), generator=torch.Generator().manual_seed(1))
            with torch.no_grad():
                got = m.eval()(ids.to("tpu")).logits.cpu()
            assert type(m.model.layers[0].mlp.up_proj.weight).__name__ == {tensor!r}
            assert torch.equal(got, torch.load({str(tmp_path / "want.pt")!r})), "outputs differ"
            print("reloaded ok")
        """, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "reloaded ok" in r.stdout


def test_tpu_torchao_config_round_trips_through_its_dict():
    """The config a saved model's config.json holds decodes to the same configs
    (the fast check of what the slow reload tests need)."""
    from torchao.quantization.granularity import PerRow
    from transformers.quantizers.auto import AutoQuantizationConfig
    for config in (TpuInt4WeightOnlyConfig(64), Int8WeightOnlyConfig(),
                   TpuFloat8DynamicActivationFloat8WeightConfig(granularity=PerRow())):
        d = TpuTorchAoConfig(config).to_dict()
        assert d["quant_method"] == "torch_tpu"
        got = AutoQuantizationConfig.from_dict(d)
        assert type(got) is TpuTorchAoConfig and got.quant_type == config

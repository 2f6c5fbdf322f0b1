"""PEFT on tpu: LoRA fine-tuning of a causal LM (get_peft_model), then merge and save,
against the same steps on the CPU."""
import copy

import peft
import torch
import transformers

CFG = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)


def _lora_train(base, device, steps=3):
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0,
                           task_type="CAUSAL_LM", init_lora_weights="gaussian")
    torch.manual_seed(1)  # the LoRA A/B initialisation, drawn on the CPU
    model = peft.get_peft_model(copy.deepcopy(base), lora).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 64, (4, 12), generator=g).to(device)  # one batch: the loss must fall
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return model, losses


def test_lora_finetune_merge_and_save_matches_cpu(tmp_path):
    torch.manual_seed(0)
    base = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CFG))
    cpu_model, cpu_losses = _lora_train(base, "cpu")
    tpu_model, tpu_losses = _lora_train(base, "tpu")
    trainable = [n for n, p in tpu_model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert all(p.device.type == "tpu" for p in tpu_model.parameters())
    torch.testing.assert_close(tpu_losses, cpu_losses, rtol=1e-5, atol=1e-5)
    assert tpu_losses[-1] < tpu_losses[0]

    # The adapter saves and reloads onto tpu.
    tpu_model.save_pretrained(tmp_path / "adapter")
    assert (tmp_path / "adapter" / "adapter_model.safetensors").is_file()
    reloaded = peft.PeftModel.from_pretrained(copy.deepcopy(base).to("tpu"), tmp_path / "adapter")
    ids = torch.randint(0, 64, (2, 10))
    with torch.no_grad():
        want = cpu_model(input_ids=ids).logits
        torch.testing.assert_close(reloaded(input_ids=ids.to("tpu")).logits.cpu(), want,
                                   rtol=1e-4, atol=1e-5)
        merged = tpu_model.merge_and_unload()
        assert not any("lora_" in n for n, _ in merged.named_parameters())
        torch.testing.assert_close(merged(input_ids=ids.to("tpu")).logits.cpu(), want,
                                   rtol=1e-4, atol=1e-5)
    merged.save_pretrained(tmp_path / "merged")
    again = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged", device_map="tpu")
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=ids.to("tpu")).logits.cpu(), want,
                                   rtol=1e-4, atol=1e-5)

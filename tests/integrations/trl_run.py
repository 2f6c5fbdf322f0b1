"""One TRL run (SFT, DPO or GRPO) of a tiny Llama, as a user writes it: imports torch,
transformers, datasets and trl, never torch_tpu (the device comes from the installed
backend). Run as a script by test_trl.py on tpu, or as the CPU reference with torch_tpu not
loaded at all; prints a JSON summary on its last line.

    python trl_run.py sft|dpo|grpo OUT_DIR '{"bf16": true, "max_steps": 3, "use_cpu": false}'
"""
import json
import os
import sys

import datasets
import torch
import transformers
import trl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vllm_serving"))
from tiny_models import save_tokenizer  # noqa: E402  (a byte-level BPE trained here)

kind, out_dir, opts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

tokenizer = save_tokenizer(os.path.join(out_dir, "tokenizer"), vocab_size=300)
cfg = transformers.LlamaConfig(
    vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
    bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    pad_token_id=tokenizer.pad_token_id)
torch.manual_seed(0)
# Saved and loaded by path, as users load a checkpoint: DPO and GRPO build their reference
# model from the path in the config.
model_dir = os.path.join(out_dir, "model")
transformers.LlamaForCausalLM(cfg).save_pretrained(model_dir)
tokenizer.save_pretrained(model_dir)
model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)

# The dtype a decoder layer's matmul produces inside a training step: bfloat16 when bf16=True's
# autocast is applied, float32 when it is not. (Not the LM head: TRL computes log-probabilities
# from `lm_head.weight` directly, so that module is never called.)
seen = {}


def note_dtype(mod, inp, out):
    if torch.is_grad_enabled() and mod.training:
        seen.setdefault("train_matmul_dtype", str(out.dtype))


model.model.layers[0].mlp.down_proj.register_forward_hook(note_dtype)

PROMPTS = ["The quick brown fox", "A tensor is", "Hello world!", "Paged attention keeps",
           "Numbers: 0 1 2", "Serving language models", "How are you", "The lazy dog"]
common = dict(output_dir=out_dir, max_steps=opts.get("max_steps", 3), logging_steps=1,
              learning_rate=opts.get("lr", 1e-3), report_to=[], seed=7, save_strategy="no",
              dataloader_num_workers=0, disable_tqdm=True, bf16=opts.get("bf16", False),
              use_cpu=opts.get("use_cpu", False))

if kind == "sft":
    data = datasets.Dataset.from_dict({"text": [p + " jumps over the lazy dog." for p in PROMPTS]})
    args = trl.SFTConfig(per_device_train_batch_size=4, max_length=32, **common)
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=data,
                             processing_class=tokenizer)
elif kind == "dpo":
    data = datasets.Dataset.from_dict({
        "prompt": PROMPTS,
        "chosen": [" is fine, thank you."] * len(PROMPTS),
        "rejected": [" 17 18 19 20."] * len(PROMPTS)})
    args = trl.DPOConfig(per_device_train_batch_size=4, max_length=32, **common)
    trainer = trl.DPOTrainer(model=model, args=args, train_dataset=data,
                             processing_class=tokenizer)
elif kind == "grpo":
    data = datasets.Dataset.from_dict({"prompt": PROMPTS})

    def reward_short_and_digits(completions, **kwargs):
        # Any deterministic function of the text will do: the test checks training, not skill.
        return [sum(ch.isdigit() for ch in c) - 0.1 * len(c) for c in completions]

    args = trl.GRPOConfig(per_device_train_batch_size=4, num_generations=4,
                          max_completion_length=8, beta=0.04, **common)
    trainer = trl.GRPOTrainer(model=model, args=args, train_dataset=data,
                              reward_funcs=reward_short_and_digits, processing_class=tokenizer)
else:
    raise SystemExit(f"unknown trainer {kind!r}: sft, dpo or grpo")

before = {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()}
trainer.train()
after = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
torch.save(after, os.path.join(out_dir, "final_weights.pt"))
print(json.dumps({
    "device": str(next(model.parameters()).device),
    "param_dtype": str(next(model.parameters()).dtype),
    "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
    "global_step": trainer.state.global_step,
    "changed": max((after[k] - before[k]).abs().max().item() for k in after),
    **seen,
}))

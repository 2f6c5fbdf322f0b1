"""One Trainer run of a tiny Llama, as a user would write it: imports only torch and
transformers. Run as a script by test_trainer.py (tpu, or the CPU reference with
torch_tpu not loaded at all) and prints a JSON summary on its last line.

    python trainer_run.py OUT_DIR '{"max_steps": 4, ...}'
"""
import json
import sys

import torch
import transformers

out_dir, opts = sys.argv[1], json.loads(sys.argv[2])

VOCAB, SEQ = 64, 16


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self, n, offset=0):
        self.n, self.offset = n, offset

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(1000 + self.offset + i)
        ids = torch.randint(0, VOCAB, (SEQ,), generator=g)
        return {"input_ids": ids, "labels": ids.clone()}


cfg = transformers.LlamaConfig(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    attention_dropout=opts.get("dropout", 0.0))
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(cfg)
if opts.get("module_compile"):
    # Accelerate 1.15's DynamoBackend enum has no "tpu", so TrainingArguments'
    # torch_compile_backend cannot name it; nn.Module.compile can.
    model.compile(backend=opts["module_compile"])

args = transformers.TrainingArguments(
    output_dir=out_dir, per_device_train_batch_size=4, per_device_eval_batch_size=4,
    learning_rate=opts.get("lr", 3e-3), max_steps=opts.get("max_steps", 4), logging_steps=1,
    gradient_accumulation_steps=opts.get("grad_accum", 1),
    eval_strategy="steps" if opts.get("eval_steps") else "no", eval_steps=opts.get("eval_steps"),
    save_strategy="steps" if opts.get("save_steps") else "no", save_steps=opts.get("save_steps"),
    lr_scheduler_type="linear", warmup_steps=1, report_to=[], seed=7,
    dataloader_num_workers=0, disable_tqdm=True,
    use_cpu=opts.get("use_cpu", False), torch_compile=opts.get("torch_compile", False),
    torch_compile_backend=opts.get("torch_compile_backend"), bf16=opts.get("bf16", False))
# The dtype the LM head computes in while training: bfloat16 under bf16=True's autocast.
seen = {}


def note_dtype(mod, inp, out):
    if mod.training:
        seen.setdefault("dtype", str(out.dtype))  # returns None: the output is unchanged


model.lm_head.register_forward_hook(note_dtype)
callbacks = []
if opts.get("tpu_rng_callback"):
    # The one line a user adds to keep the tpu generators in checkpoints (Transformers
    # saves only a fixed list of devices' generators; see torch_tpu.integrations.transformers).
    from torch_tpu.integrations.transformers import TpuRngStateCallback
    callbacks.append(TpuRngStateCallback())
trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenDataset(32),
                               eval_dataset=TokenDataset(8, offset=500), callbacks=callbacks)
trainer.train(resume_from_checkpoint=opts.get("resume"))
# A random draw on the training device after the run: equal draws mean equal generator states.
after = torch.rand(4, device=args.device).tolist()
final = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
torch.save(final, f"{out_dir}/final_weights.pt")
print(json.dumps({
    "device": str(next(model.parameters()).device),
    "args_device": str(args.device),
    "losses": [h["loss"] for h in trainer.state.log_history if "loss" in h],
    "eval_losses": [h["eval_loss"] for h in trainer.state.log_history if "eval_loss" in h],
    "global_step": trainer.state.global_step,
    "rand_after": after,
    "param_dtype": str(next(model.parameters()).dtype),
    "autocast_dtype": seen.get("dtype"),
}))

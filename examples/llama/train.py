"""Train Transformers' LlamaForCausalLM (or Qwen3ForCausalLM: examples/qwen/train.py)
from a small config with random weights on the shipped corpus, with a BPE tokenizer
trained here with `tokenizers`, then generate() with a KV cache.

    python examples/llama/train.py                       # tpu, Defer & Fuse
    python examples/llama/train.py --mode compile        # torch.compile(backend="tpu")
    python examples/llama/train.py --amp bf16 --check    # bf16 autocast; losses vs the CPU

Prints the training loss and tokens/s, then the prefill and decode tokens/s of
generate() and a sample. --check trains a few steps on the device and on the CPU from
the same weights and asserts that the losses agree.
"""
import argparse
import os
import time

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tqdm import tqdm

CORPUS = os.path.join(os.path.dirname(__file__), "..", "mingpt", "corpus.txt")


def train_tokenizer(text, vocab_size):
    """A byte-level BPE tokenizer learnt from the corpus (no hub access)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text], trainer)
    return tok


def build_model(arch, vocab, width, depth, seq):
    common = dict(vocab_size=vocab, hidden_size=width, intermediate_size=4 * width,
                  num_hidden_layers=depth, num_attention_heads=max(width // 32, 2),
                  num_key_value_heads=max(width // 64, 1), max_position_embeddings=2 * seq,
                  pad_token_id=0, eos_token_id=1, bos_token_id=1)
    if arch == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**common))
    if arch == "qwen3":
        return transformers.Qwen3ForCausalLM(transformers.Qwen3Config(
            **common, head_dim=width // max(width // 32, 2)))
    raise ValueError(f"unknown --arch {arch!r}: llama or qwen3")


def batches(data, batch, seq, steps, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        yield torch.stack([data[s:s + seq] for s in starts.tolist()])


def train(model, data, args, device, steps, bar=True):
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step_fn = model
    if args.mode == "compile" and device != "cpu":
        step_fn = torch.compile(model, backend="tpu")
    losses, tokens, start = [], 0, time.perf_counter()
    it = batches(data, args.batch, args.seq, steps, seed=1)
    pbar = tqdm(it, total=steps, desc=f"train {args.arch} on {device}", disable=not bar)
    for ids in pbar:
        ids = ids.to(device)
        with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                            enabled=args.amp == "bf16"):
            loss = step_fn(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        tokens += ids.numel()
        pbar.set_postfix_str(f"loss {losses[-1]:.3f} {tokens / (time.perf_counter() - start):.0f} tok/s")
    return losses, tokens / (time.perf_counter() - start)


def generate(model, tok, prompt, device, new_tokens):
    """Prefill tokens/s (the prompt through the model once) and decode tokens/s (each
    further token through the KV cache), timed separately."""
    model.eval()
    ids = torch.tensor([tok.encode(prompt).ids], device=device)
    kw = dict(do_sample=False, use_cache=True, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        # Warm-up at the timed length: the eager generate loop grows input_ids (and the
        # dynamic KV cache) by one column a token, so each sequence length has its own
        # small programs; compiling them here keeps compile time out of the decode figure.
        model.generate(input_ids=ids, max_new_tokens=new_tokens, **kw)
        t0 = time.perf_counter()
        model.generate(input_ids=ids, max_new_tokens=1, **kw).cpu()
        t1 = time.perf_counter()
        out = model.generate(input_ids=ids, max_new_tokens=new_tokens, **kw).cpu()
        t2 = time.perf_counter()
    prefill = ids.shape[1] / (t1 - t0)
    decode = (new_tokens - 1) / max((t2 - t1) - (t1 - t0), 1e-9)
    return tok.decode(out[0, ids.shape[1]:].tolist()), prefill, decode


def main(default_arch="llama"):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default=default_arch, choices=["llama", "qwen3"])
    p.add_argument("--device", default="tpu")
    p.add_argument("--mode", default="defer_and_fuse", choices=["defer_and_fuse", "strict_eager", "compile"])
    p.add_argument("--amp", default="none", choices=["none", "bf16"])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--check", action="store_true", help="a few steps on the device and on the CPU must agree")
    args = p.parse_args()

    if args.device.startswith("tpu"):
        import torch_tpu
        torch_tpu.set_execution_mode("strict_eager" if args.mode == "compile" else args.mode)
    text = open(CORPUS, encoding="utf-8").read()
    tok = train_tokenizer(text, args.vocab)
    data = torch.tensor(tok.encode(text).ids)
    vocab = tok.get_vocab_size()
    print(f"corpus: {len(text)} characters -> {len(data)} BPE tokens (vocabulary {vocab})")

    torch.manual_seed(0)
    model = build_model(args.arch, vocab, args.width, args.depth, args.seq)
    if args.check:
        steps = min(args.steps, 4)
        ref = build_model(args.arch, vocab, args.width, args.depth, args.seq)
        ref.load_state_dict(model.state_dict())
        got, _ = train(model, data, args, args.device, steps, bar=False)
        want, _ = train(ref, data, args, "cpu", steps, bar=False)
        tol = 3e-2 if args.amp == "bf16" else 1e-3
        for i, (a, b) in enumerate(zip(got, want)):
            assert abs(a - b) <= tol * max(abs(b), 1), f"step {i}: {args.device} loss {a} vs CPU {b}"
        print(f"check passed: {steps} steps on {args.device} match the CPU "
              f"(losses {', '.join(f'{x:.4f}' for x in got)})")
        return
    losses, tok_s = train(model, data, args, args.device, args.steps)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, {tok_s:.0f} training tokens/s")
    sample, prefill, decode = generate(model, tok, "A grey heron", args.device, args.new_tokens)
    print(f"generate: prefill {prefill:.0f} tokens/s, decode {decode:.1f} tokens/s (KV cache)")
    print("sample: A grey heron" + sample)


if __name__ == "__main__":
    main()

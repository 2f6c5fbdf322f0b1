"""Train Transformers' LlamaForCausalLM (or Qwen3ForCausalLM: examples/qwen/train.py)
from a small config with random weights on the shipped corpus, with a BPE tokenizer
trained here with `tokenizers`, then generate() with a KV cache.

    python examples/llama/train.py                       # tpu, Defer & Fuse
    python examples/llama/train.py --mode compile        # torch.compile(backend="tpu")
    python examples/llama/train.py --amp bf16 --check    # bf16 autocast; losses vs the CPU
    python examples/llama/train.py --kernels jax --check # fused RMSNorm+matmul in JAX vs the CPU

--kernels jax puts the fused RMSNorm + matmul of jax_kernels.py (a
torch_tpu.kernels.jax_op) in place of each norm that feeds a matmul (the MLP's and the
final one); the CPU run of --check keeps the stock model, the reference.

Prints the training loss and tokens/s, then the prefill and decode tokens/s of
generate() and a sample. --check trains a few steps on the device and on the CPU from
the same weights and asserts that the losses agree. The flags, the training loop, its
progress bar and --check are examples/harness.py's, as in the other examples (--amp
off|bf16|fp16; `none` is another name for off).
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402
import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from examples import harness  # noqa: E402

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


class CausalLM(torch.nn.Module):
    """The Hugging Face model called the way examples/harness.py's training loop calls
    a model: model(input_ids, labels) -> (logits, loss); the model itself is `.hf`."""

    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, input_ids, labels):
        out = self.hf(input_ids=input_ids, labels=labels)
        return out.logits, out.loss


def train(args, vocab, data, device, mode, steps, quiet=False, kernels=None):
    """Trains `steps` steps from the seed's weights on the same batches on every
    device; returns harness.train_loop's (model, callable model, losses, seconds per step).
    `kernels` overrides --kernels (the --check reference)."""
    kernels = kernels or args.kernels

    def build(dev):
        torch.manual_seed(args.seed)  # the same initial weights on every device
        hf = build_model(args.arch, vocab, args.width, args.depth, args.seq)
        if kernels == "jax":
            from examples.llama.jax_kernels import fuse_rms_norm_matmul
            fuse_rms_norm_matmul(hf)
        model = CausalLM(hf).to(dev)
        return model, torch.optim.AdamW(model.parameters(), lr=args.lr or 3e-3)
    it = batches(data, args.batch, args.seq, steps, seed=1)

    def next_batch():
        ids = next(it)
        return ids, ids  # the labels are the inputs: Transformers shifts them itself
    return harness.train_loop(build, next_batch, device, mode, steps,
                              f"train {args.arch} on {device} {mode}", quiet, args.amp)


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
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_common_args(p, steps=60, batch=8, width=128, depth=2)
    p.add_argument("--arch", default=default_arch, choices=["llama", "qwen3"])
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=24)
    p.add_argument("--kernels", choices=["none", "jax"], default="none",
                   help="jax: the fused RMSNorm+matmul JAX kernel (examples/llama/jax_kernels.py)")
    args = p.parse_args()

    harness.announce(args.device)
    text = open(CORPUS, encoding="utf-8").read()
    tok = train_tokenizer(text, args.vocab)
    data = torch.tensor(tok.encode(text).ids)
    vocab = tok.get_vocab_size()
    print(f"corpus: {len(text)} characters -> {len(data)} BPE tokens (vocabulary {vocab}); "
          f"device {args.device}, mode {args.mode}, amp {args.amp}, kernels {args.kernels}")

    if args.check:
        args.check_steps = min(args.steps, args.check_steps)
        # The CPU reference run is the stock model, whatever --kernels says.
        harness.check(lambda dev, *a: train(args, vocab, data, dev, *a,
                                            kernels=None if dev == args.device else "none"),
                      args, rtol=1e-3)
        print(f"check passed: {args.check_steps} steps on {args.device} match the CPU")
        return
    model, _, losses, times = train(args, vocab, data, args.device, args.mode, args.steps,
                                    quiet=args.quiet)
    tok_s, timed = harness.throughput(times, args.batch * args.seq)
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}; first step {times[0]:.2f} s (includes "
          f"compiling), {tok_s:.0f} training tokens/s over the {timed} steps after it")
    sample, prefill, decode = generate(model.hf, tok, "A grey heron", args.device,
                                       args.new_tokens)
    print(f"generate: prefill {prefill:.0f} tokens/s, decode {decode:.1f} tokens/s (KV cache)")
    print("sample: A grey heron" + sample)


if __name__ == "__main__":
    main()

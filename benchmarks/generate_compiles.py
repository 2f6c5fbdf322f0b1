"""XLA compiles per decoded token of generate() on tpu, and decode tokens/s, in a fresh
process with the persistent compile cache off (so that every program is compiled here).

    TORCH_TPU_CACHE=0 python benchmarks/generate_compiles.py --mode strict_eager
    TORCH_TPU_CACHE=0 python benchmarks/generate_compiles.py --mode defer_and_fuse --cache dynamic

A tiny Llama (random weights, the config of tests/hf/test_generate.py unless --hidden is
given), greedy, one prompt. A LogitsProcessor reads torch_tpu.debug.metrics() at every
decoding step: "compiles per token" is how many programs XLA compiled between one
step's logits and the next (the eager generate loop around the model plus the next
forward); "host-tier ops" the ops run on the host instead (csrc/aten/host_tier.h).
Decode tokens/s: the first generate() of the process (cold: its compiles count), then
the median of --repeat more of the same length (warm).
"""
import argparse
import os
import statistics
import sys
import time

import torch
import torch_tpu
import transformers

if torch_tpu.settings.get("TORCH_TPU_CACHE"):
    sys.exit("run with TORCH_TPU_CACHE=0: disk hits would hide compiles")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="strict_eager", choices=["strict_eager", "defer_and_fuse"])
    p.add_argument("--cache", default="static", choices=["static", "dynamic"])
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--prompt", type=int, default=6)
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--vocab", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    torch_tpu.set_execution_mode(a.mode)
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=2 * a.hidden,
                                   num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=a.prompt + a.new_tokens + 8,
                                   pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = transformers.LlamaForCausalLM(cfg).eval().to("tpu")
    ids = torch.randint(3, 64, (1, a.prompt)).to("tpu")
    marks = []

    class Record(transformers.LogitsProcessor):
        def __call__(self, input_ids, scores):
            m = torch_tpu.debug.metrics()
            marks.append((m["programs_compiled"], m.get("host_tier_ops", 0)))
            return scores

    kw = dict(do_sample=False, eos_token_id=None, max_new_tokens=a.new_tokens)
    if a.cache == "static":
        kw["cache_implementation"] = "static"

    def run(procs=()):
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(input_ids=ids, logits_processor=list(procs), **kw).cpu()
        return time.perf_counter() - t0

    cold = run([Record()])
    per_token = [b[0] - a_[0] for a_, b in zip(marks, marks[1:])]
    host = marks[-1][1] - marks[0][1]
    warm = statistics.median(run() for _ in range(a.repeat))
    m = torch_tpu.debug.metrics()
    print(f"mode {a.mode}, {a.cache} cache, prompt {a.prompt}, {a.new_tokens} new tokens, "
          f"hidden {a.hidden}; load {os.getloadavg()[0]:.1f}")
    print(f"compiles per token (between token k and k+1, k=1..{a.new_tokens - 1}): {per_token}")
    print(f"compiles after the second token: {sum(per_token[1:])}; host-tier ops meanwhile: {host}")
    print(f"first generate(): {cold:.2f} s ({a.new_tokens / cold:.1f} tokens/s); "
          f"warm median of {a.repeat}: {warm:.3f} s ({a.new_tokens / warm:.1f} tokens/s)")
    print(f"process: {m['programs_compiled']} programs compiled ({m['compile_seconds']:.2f} s), "
          f"{m.get('host_tier_ops', 0)} host-tier ops, {m['cpu_fallback_ops']} CPU-fallback ops")


if __name__ == "__main__":
    main()

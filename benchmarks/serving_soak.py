"""Soak test of vLLM's OpenAI server on the tpu device (torch_tpu's plugin).

    .venv-vllm/bin/python benchmarks/serving_soak.py --minutes 5 [--clients 32] [--quick]

Starts the server on 127.0.0.1, takes each prompt's greedy reference from the server
with one request at a time before the load starts, then runs `clients` streaming clients for `minutes`, each sending prompts in
a loop. Every response must be complete (max_tokens tokens) and equal to its reference.
The server's RSS is sampled every 10 s. Exits non-zero on any error, mismatch, or RSS
growth over 10% between the first sample after the first minute and the last sample.
"""
import argparse
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving_common as common  # noqa: E402


def rss_bytes(pid: int) -> int:
    """Resident set size of pid and its children (the engine may run in a child)."""
    import psutil

    p = psutil.Process(pid)
    return p.memory_info().rss + sum(c.memory_info().rss for c in p.children(recursive=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=16, help="distinct prompts cycled")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--quick", action="store_true",
                    help="tiny model (default: the ~100M benchmark Llama)")
    ap.add_argument("--model-dir")
    ap.add_argument("--log", help="server log file")
    args = ap.parse_args()
    import httpx

    size = "quick" if args.quick else "full"
    model_dir = args.model_dir or common.default_dir(size)
    common.save_model(model_dir, size)
    vocab = common.SIZES[size]["vocab_size"]
    prompts = [common.prompt_ids(i, 8 + i % 24, vocab) for i in range(args.prompts)]
    engine = dict(dtype="float32", max_model_len=256, max_num_seqs=args.clients,
                  max_num_batched_tokens=256, block_size=16,
                  kv_cache_memory_bytes=(32 << 20) if args.quick else (512 << 20), seed=0)
    log = args.log or os.path.join(tempfile.gettempdir(), "serving_soak_server.log")
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TOKENIZERS_PARALLELISM": "false"}

    with common.openai_server(model_dir, engine, env=env, log_path=log) as (base, proc):
        with httpx.Client(base_url=base, timeout=600) as c:
            refs = [common.stream_completion(c, p, args.max_tokens)[0] for p in prompts]
        stop = time.time() + args.minutes * 60
        lock = threading.Lock()
        stats = dict(ok=0, errors=0, mismatches=0, incomplete=0, tokens=0)
        first_error = []

        def client(k):
            with httpx.Client(base_url=base, timeout=600) as c:
                i = k
                while time.time() < stop:
                    j = i % len(prompts)
                    i += args.clients
                    try:
                        text, _, _, n = common.stream_completion(c, prompts[j], args.max_tokens)
                        key = ("incomplete" if n != args.max_tokens else
                               "mismatches" if text != refs[j] else "ok")
                    except Exception as e:  # counted, and the first one is reported
                        key = "errors"
                        with lock:
                            first_error.append(repr(e))
                        n = 0
                    with lock:
                        stats[key] += 1
                        stats["tokens"] += n

        threads = [threading.Thread(target=client, args=(k,), daemon=True)
                   for k in range(args.clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        samples = []  # (seconds since start, rss bytes)
        while any(t.is_alive() for t in threads):
            samples.append((time.time() - t0, rss_bytes(proc.pid)))
            print(f"t={samples[-1][0]:5.0f}s rss={samples[-1][1] / 2**20:7.1f} MiB {stats}",
                  flush=True)
            for t in threads:
                t.join(timeout=max(0.0, 10 - (time.time() - t0 - samples[-1][0])))
                if time.time() - t0 - samples[-1][0] >= 10:
                    break
        elapsed = time.time() - t0
        samples.append((elapsed, rss_bytes(proc.pid)))
        healthy = httpx.get(base + "/health", timeout=10).status_code == 200

    after_warm = [r for t, r in samples if t >= 60] or [samples[-1][1]]
    growth = after_warm[-1] / after_warm[0] - 1
    print(f"done: {elapsed:.0f} s, {args.clients} clients, requests ok={stats['ok']} "
          f"errors={stats['errors']} mismatches={stats['mismatches']} "
          f"incomplete={stats['incomplete']}, {stats['tokens'] / elapsed:.1f} output tok/s, "
          f"server RSS first {samples[0][1] / 2**20:.0f} MiB, after 1 min "
          f"{after_warm[0] / 2**20:.0f} MiB, last {after_warm[-1] / 2**20:.0f} MiB "
          f"({growth * 100:+.1f}%), healthy={healthy}")
    if first_error:
        print("first error:", first_error[0])
    failed = (stats["errors"] or stats["mismatches"] or stats["incomplete"] or not stats["ok"]
              or growth > 0.10 or not healthy)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

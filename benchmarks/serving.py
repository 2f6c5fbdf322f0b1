"""Serving benchmark: vLLM with torch_tpu's plugin vs vLLM's CPU backend vs Transformers.

Run in the serving environment (bash scripts/install.sh vllm):
    .venv-vllm/bin/python benchmarks/serving.py            # ~100M-parameter Llama
    .venv-vllm/bin/python benchmarks/serving.py --quick    # tiny model, few requests

Rows (each in its own process, so one backend's state or threads never touch another's):
  plugin      vLLM on the tpu device through torch_tpu's platform plugin (eager runner)
  plugin-compiled  the same with the runner's compiled path (additional_config
              torch_tpu_compile: torch.compile(backend="tpu") per bucket)
  vllm-cpu    vLLM's own CPU platform (TORCH_TPU_VLLM=0: our plugin declines)
  hf-tpu      Transformers generate() on tpu, one batch of all requests
  hf-cpu      Transformers generate() on the CPU, same batch
Columns: offline throughput (output tokens/s; vLLM's LLM.generate, or one generate()
batch, timed after a warm-up run), and online latency against the OpenAI server on
127.0.0.1 with streaming clients: mean time to first token (TTFT) and mean time per
output token after the first (TPOT), with 1 and with C concurrent clients.
The model has random weights (built from its config), greedy decoding, ignore_eos.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving_common as common  # noqa: E402

ROWS = {
    "plugin": "vLLM + torch_tpu plugin (tpu, eager)",
    "plugin-compiled": "vLLM + torch_tpu plugin (tpu, compiled)",
    "vllm-cpu": "vLLM CPU backend",
    "hf-tpu": "Transformers generate() on tpu",
    "hf-cpu": "Transformers generate() on CPU",
}


def settings(quick: bool) -> dict:
    # block_size 32: vLLM's CPU attention takes multiples of 32 only; the plugin any size.
    if quick:
        return dict(size="quick", requests=8, prompt_len=16, output_len=16, clients=(1, 4),
                    online_requests=(2, 4),
                    engine=dict(dtype="float32", max_model_len=128, max_num_seqs=8,
                                max_num_batched_tokens=64, block_size=32,
                                kv_cache_memory_bytes=16 << 20, seed=0))
    return dict(size="full", requests=64, prompt_len=64, output_len=64, clients=(1, 16),
                online_requests=(3, 32),
                engine=dict(dtype="float32", max_model_len=256, max_num_seqs=64,
                            max_num_batched_tokens=512, block_size=32,
                            kv_cache_memory_bytes=768 << 20, seed=0))


def _env_for(row: str) -> dict:
    env = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "TOKENIZERS_PARALLELISM": "false",
           "VLLM_LOGGING_LEVEL": "WARNING"}
    if row == "vllm-cpu":
        env.update(TORCH_TPU_VLLM="0", VLLM_CPU_KVCACHE_SPACE="1")
    return env


# ---- one row (runs in a child process) -------------------------------------------------
def _engine_args(row, s) -> dict:
    if row == "plugin-compiled":
        return {**s["engine"], "additional_config": {"torch_tpu_compile": True}}
    return s["engine"]


def _offline_vllm(model_dir, s, row) -> float:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=model_dir, **_engine_args(row, s))
    vocab = common.SIZES[s["size"]]["vocab_size"]
    prompts = [TokensPrompt(prompt_token_ids=common.prompt_ids(i, s["prompt_len"], vocab))
               for i in range(s["requests"])]
    params = SamplingParams(temperature=0.0, max_tokens=s["output_len"], ignore_eos=True)
    t0 = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    elapsed = time.perf_counter() - t0
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    del llm
    return tokens / elapsed


def _online(model_dir, s, row, log_path) -> dict:
    import httpx

    vocab = common.SIZES[s["size"]]["vocab_size"]
    result = {}
    with common.openai_server(model_dir, _engine_args(row, s), env=_env_for(row),
                              log_path=log_path) as (base, _):
        with httpx.Client(base_url=base, timeout=600) as warm:  # first request off the clock
            common.stream_completion(warm, common.prompt_ids(999, s["prompt_len"], vocab), 4)
        for clients, n in zip(s["clients"], s["online_requests"]):
            def one(i):
                with httpx.Client(base_url=base, timeout=600) as c:
                    return common.stream_completion(
                        c, common.prompt_ids(i, s["prompt_len"], vocab), s["output_len"])
            with ThreadPoolExecutor(clients) as pool:
                runs = list(pool.map(one, range(n)))
            result[clients] = (sum(r[1] for r in runs) / n, sum(r[2] for r in runs) / n)
    return result


def _offline_hf(model_dir, s, device) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    if device == "tpu":
        import torch_tpu  # noqa: F401
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    model = model.to(device)
    model.generation_config.eos_token_id = None
    vocab = common.SIZES[s["size"]]["vocab_size"]
    ids = torch.tensor([common.prompt_ids(i, s["prompt_len"], vocab)
                        for i in range(s["requests"])], device=device)
    kw = dict(attention_mask=torch.ones_like(ids), max_new_tokens=s["output_len"],
              min_new_tokens=s["output_len"], do_sample=False, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, **kw).cpu()  # warm-up: compiles every step's shapes on tpu
        t0 = time.perf_counter()
        out = model.generate(ids, **kw).cpu()
        elapsed = time.perf_counter() - t0
    return (out.shape[1] - ids.shape[1]) * out.shape[0] / elapsed


def run_row(row, model_dir, s, log_path, offline_only=False) -> dict:
    if row in ("plugin", "plugin-compiled", "vllm-cpu"):
        tps = _offline_vllm(model_dir, s, row)
        online = None if offline_only else _online(model_dir, s, row, log_path)
        return dict(tokens_per_s=tps, online=online)
    return dict(tokens_per_s=_offline_hf(model_dir, s, row.split("-")[1]), online=None)


# ---- driver ----------------------------------------------------------------------------
def _fmt_ms(x):
    return "n/a" if x is None else f"{x * 1000:.0f}"


def table(results: dict, s: dict) -> str:
    c1, c2 = s["clients"]
    lines = [f"| row | output tok/s (offline) | ratio to vLLM CPU | TTFT ms @{c1} | TPOT ms @{c1} "
             f"| TTFT ms @{c2} | TPOT ms @{c2} |", "|---|---|---|---|---|---|---|"]
    base = results.get("vllm-cpu", {}).get("tokens_per_s")  # the target: ours / vLLM CPU
    for row, label in ROWS.items():
        r = results.get(row)
        if r is None:
            continue
        if "error" in r:
            lines.append(f"| {label} | failed: {r['error']} | | | | | |")
            continue
        tps = r["tokens_per_s"]
        ratio = f"{tps / base:.2f}x" if base else "n/a"
        on = r["online"] or {}
        get = lambda c, k: on.get(c, on.get(str(c), (None, None)))[k]  # noqa: E731
        lines.append(f"| {label} | {tps:.1f} | {ratio} | {_fmt_ms(get(c1, 0))} | "
                     f"{_fmt_ms(get(c1, 1))} | {_fmt_ms(get(c2, 0))} | {_fmt_ms(get(c2, 1))} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny model, few requests")
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset of rows")
    ap.add_argument("--model-dir", help="where the random-weight checkpoint is kept")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--offline-only", action="store_true", help="skip the online (server) runs")
    ap.add_argument("--row", help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    s = settings(args.quick)
    model_dir = args.model_dir or common.default_dir(s["size"])

    if args.row:
        for k, v in _env_for(args.row).items():
            os.environ.setdefault(k, v)
        res = run_row(args.row, model_dir, s, args.out + ".server.log", args.offline_only)
        with open(args.out, "w") as f:
            json.dump(res, f)
        return

    common.save_model(model_dir, s["size"])
    results = {}
    work = tempfile.mkdtemp(prefix="serving_bench_")
    for row in args.rows.split(","):
        out = os.path.join(work, row + ".json")
        t0 = time.time()
        proc = subprocess.run([sys.executable, __file__, "--row", row, "--out", out,
                               "--model-dir", model_dir] + (["--quick"] if args.quick else [])
                              + (["--offline-only"] if args.offline_only else []),
                              env={**os.environ, **_env_for(row)}, capture_output=True,
                              text=True)
        if proc.returncode == 0:
            results[row] = json.load(open(out))
        else:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            results[row] = {"error": tail[0][:200]}
            print(f"[{row}] failed; stderr tail:\n{proc.stderr[-3000:]}", file=sys.stderr)
        print(f"[{row}] {time.time() - t0:.0f} s: {json.dumps(results[row])}", file=sys.stderr,
              flush=True)
    print(table(results, s))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    sys.exit(0 if all("error" not in r for r in results.values()) else 1)


if __name__ == "__main__":
    main()

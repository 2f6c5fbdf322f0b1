"""Shared by benchmarks/serving.py and serving_soak.py: a Llama checkpoint built from a
config with random weights, a word-level tokenizer covering its whole vocabulary (so
any sampled id detokenizes), and an OpenAI server started on 127.0.0.1."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import torch

SIZES = {
    # ~100M parameters (embeddings 2 x 24.6M, 12 layers x 6.3M).
    "full": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12, intermediate_size=2048, vocab_size=32000),
    # head_dim 64: vLLM's CPU attention has no kernel for smaller heads.
    "quick": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=2, intermediate_size=256, vocab_size=512),
}


def save_model(path: str, size: str, seed: int = 0) -> None:
    """Writes config, random weights (float32 safetensors) and tokenizer to `path`."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    if os.path.exists(os.path.join(path, "config.json")):
        return
    os.makedirs(path, exist_ok=True)
    cfg = SIZES[size]
    vocab = {f"w{i}": i for i in range(cfg["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="w1",
                                                eos_token="w2", pad_token="w0")
    fast.save_pretrained(path)
    config = transformers.LlamaConfig(**cfg, max_position_embeddings=1024, bos_token_id=1,
                                      eos_token_id=2, pad_token_id=0,
                                      tie_word_embeddings=False, torch_dtype="float32")
    torch.manual_seed(seed)
    transformers.LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)


def default_dir(size: str) -> str:
    import tempfile

    c = SIZES[size]
    return os.path.join(tempfile.gettempdir(), f"torch_tpu_serving_{size}_h{c['hidden_size']}"
                        f"_l{c['num_hidden_layers']}_a{c['num_attention_heads']}")


def prompt_ids(i: int, length: int, vocab: int) -> list[int]:
    """A deterministic prompt of `length` ids (no special ids 0-2)."""
    return [3 + (i * 7919 + j * 104729) % (vocab - 3) for j in range(length)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def openai_server(model_dir: str, engine: dict, env: dict | None = None, log_path=None,
                  timeout_s: float = 1800, served_name: str = "model"):
    """Runs vLLM's OpenAI server with the `vllm serve` CLI of this environment and yields
    (base_url, process). Used by the benchmarks and by tests/vllm_serving/test_server.py."""
    import httpx

    port = free_port()
    vllm_cli = os.path.join(os.path.dirname(sys.executable), "vllm")
    args = [vllm_cli, "serve", model_dir, "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", served_name, "--disable-log-stats"]
    for k, v in engine.items():
        args += [f"--{k.replace('_', '-')}", json.dumps(v) if isinstance(v, dict) else str(v)]
    log = open(log_path or os.devnull, "w")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode} (log: {log_path})")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            if time.time() > deadline:
                raise RuntimeError(f"server not healthy after {timeout_s} s (log: {log_path})")
            time.sleep(1)
        yield base, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def stream_completion(client, prompt: list[int], max_tokens: int):
    """One streaming greedy completion: (token ids as text pieces joined, ttft_s, tpot_s,
    completion_tokens)."""
    body = dict(model="model", prompt=prompt, max_tokens=max_tokens, temperature=0.0,
                ignore_eos=True, stream=True, stream_options={"include_usage": True})
    t0 = time.perf_counter()
    first = last = None
    pieces, n = [], 0
    with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:500]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
            for c in chunk.get("choices", []):
                if c.get("text"):
                    now = time.perf_counter()
                    first = first or now
                    last = now
                    pieces.append(c["text"])
    if first is None:
        raise RuntimeError("no tokens streamed")
    tpot = (last - first) / (n - 1) if n > 1 else 0.0
    return "".join(pieces), first - t0, tpot, n

"""Start-up of the plugin's compiled runner at benchmarks/serving.py's full settings.

    TORCH_TPU_CACHE=0 .venv-vllm/bin/python benchmarks/serving_startup.py [--max-num-seqs 64]

(TORCH_TPU_CACHE=0: cold, nothing from the persistent cache.) Prints the wall time of
LLM(...), the warm-up time per token bucket, each compiled graph's FX node count and XLA
compile seconds, and Dynamo's own phase times per graph.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serving_common as common  # noqa: E402

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the runner in this process
import torch  # noqa: E402
import torch_tpu  # noqa: E402
from vllm import LLM  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--max-num-seqs", type=int, default=64)
args = ap.parse_args()
d = common.default_dir("full")
common.save_model(d, "full")
t0 = time.perf_counter()
llm = LLM(model=d, dtype="float32", max_model_len=256, max_num_seqs=args.max_num_seqs,
          max_num_batched_tokens=512, block_size=32, kv_cache_memory_bytes=768 << 20, seed=0,
          additional_config={"torch_tpu_compile": True})
wall = time.perf_counter() - t0
r = llm.llm_engine.model_executor.driver_worker.worker.model_runner
m = torch_tpu.debug.metrics()
print("WALL", round(wall, 1), "warmup_s", round(r.warmup_seconds, 1),
      "shapes", r.num_warmup_shapes, "programs", m["programs_compiled"],
      "xla_compile_s", round(m["compile_seconds"], 1))
print("PER_BUCKET", {k: round(v, 1) for k, v in r.warmup_seconds_per_token_bucket.items()})
for g in torch_tpu.debug.compiled_graphs():
    print("GRAPH", g["id"], "nodes", g["nodes"], "compiles", g["compiles"],
          "xla_s", round(g["compile_seconds"], 1))
print(torch._dynamo.utils.compile_times())

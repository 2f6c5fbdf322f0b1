"""Train Transformers' Qwen3ForCausalLM from a small config on the shipped corpus, then
generate(); the same program as examples/llama/train.py with --arch qwen3 (see there
for the flags: --mode, --amp bf16, --check, --steps ...)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "llama"))
from train import main  # noqa: E402

if __name__ == "__main__":
    main(default_arch="qwen3")

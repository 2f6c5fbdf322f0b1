"""vLLM platform plugin: serves models with vLLM on the `tpu` device.

Registered through vLLM's `vllm.platform_plugins` entry point (pyproject.toml), so that
with torch_tpu installed `LLM(model=...)` and `vllm serve DIR` pick the tpu device
without a flag. `TORCH_TPU_VLLM=0` leaves vLLM's own platform detection alone.

Modules: platform (what vLLM asks of a device), worker (one process, one device),
model_runner (batches scheduled requests into padded, bucketed device programs),
attention (the paged KV cache and attention over it), buckets (the padded shapes).
"""
def register():
    """The entry point vLLM calls: the qualified name of our Platform, or None to pass."""
    from torch_tpu import settings
    if not settings.get("TORCH_TPU_VLLM"):
        return None
    return "torch_tpu.integrations.vllm.platform.TpuPlatform"

"""The vLLM worker for the tpu device: one process drives one device.

vLLM's executor calls these methods in order: init_device, load_model,
get_kv_cache_spec, determine_available_memory, initialize_from_config (allocates the
paged KV cache), compile_or_warm_up_model (runs every padded shape once), then
execute_model once per scheduler step.
"""
import time

import torch
from vllm.logger import init_logger
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.worker_base import CompilationTimes, WorkerBase

from torch_tpu import settings

from .model_runner import TpuModelRunner

logger = init_logger(__name__)

# The KV cache's size when the user names none (--kv-cache-memory-bytes): on the CPU
# plugin device memory is the process heap, so "90% of free memory" would take the host.
_DEFAULT_KV_CACHE_BYTES = settings.get("TORCH_TPU_VLLM_KV_CACHE_BYTES")


class TpuWorker(WorkerBase):
    def init_device(self) -> None:
        from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

        self.device = torch.device("tpu", max(self.local_rank, 0))
        torch.tpu.set_device(self.device)
        # vLLM's parallel layers ask for their (size-1) groups even on one device.
        init_distributed_environment(world_size=1, rank=self.rank,
                                     distributed_init_method=self.distributed_init_method,
                                     local_rank=self.local_rank, backend="gloo")
        ensure_model_parallel_initialized(1, 1)
        set_random_seed(self.model_config.seed)
        self.model_runner = TpuModelRunner(self.vllm_config, self.device)

    def load_model(self, *, load_dummy_weights: bool = False) -> None:
        self.model_runner.load_model()

    def get_model(self):
        return self.model_runner.model

    def get_kv_cache_spec(self):
        return self.model_runner.get_kv_cache_spec()

    def determine_available_memory(self) -> int:
        requested = self.cache_config.kv_cache_memory_bytes
        if requested:
            return int(requested)
        free, _ = torch.tpu.mem_get_info(self.device)
        return int(min(_DEFAULT_KV_CACHE_BYTES, free * self.cache_config.gpu_memory_utilization))

    def initialize_from_config(self, kv_cache_config) -> None:
        self.model_runner.initialize_kv_cache(kv_cache_config)

    def initialize_cache(self, num_gpu_blocks: int, num_cpu_blocks: int) -> None:
        self.cache_config.num_gpu_blocks = num_gpu_blocks
        self.cache_config.num_cpu_blocks = num_cpu_blocks

    def compile_or_warm_up_model(self) -> CompilationTimes:
        start = time.perf_counter()
        self.model_runner.warm_up()
        elapsed = time.perf_counter() - start
        self.model_runner.warmup_seconds = elapsed
        logger.info("torch_tpu: warm-up of %d padded shapes took %.1f s",
                    self.model_runner.num_warmup_shapes, elapsed)
        set_random_seed(self.model_config.seed)
        return CompilationTimes(language_model=elapsed, encoder=0.0)

    def execute_model(self, scheduler_output):
        return self.model_runner.execute_model(scheduler_output)

    def sample_tokens(self, grammar_output):
        raise RuntimeError("torch_tpu's runner samples inside execute_model")

    def get_supported_tasks(self):
        return ("generate",)

    def get_cache_block_size_bytes(self) -> int:
        return self.model_runner.cache_block_size_bytes()

    def check_health(self) -> None:
        return

    def synchronize_device(self) -> None:
        torch.tpu.synchronize()

    def add_lora(self, lora_request) -> bool:
        raise NotImplementedError("LoRA is not supported by torch_tpu's vLLM plugin")

    def remove_lora(self, lora_id: int) -> bool:
        return False

    def pin_lora(self, lora_id: int) -> bool:
        return False

    def list_loras(self) -> set[int]:
        return set()

    def reset_mm_cache(self) -> None:
        return

    def reset_encoder_cache(self) -> None:
        return

    def shutdown(self) -> None:
        return

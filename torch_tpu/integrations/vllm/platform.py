"""The vLLM Platform for the tpu device: names our worker and attention backend."""
import torch
from vllm.logger import init_logger
from vllm.platforms.interface import Platform, PlatformEnum
from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

import torch_tpu  # noqa: F401  (registers the device)

logger = init_logger(__name__)

# Attention layers look their backend up by name in vLLM's registry; ours is added
# through its documented register_backend() for third-party backends.
_ATTENTION = "torch_tpu.integrations.vllm.attention.TpuAttentionBackend"
if "TORCH_TPU_PAGED" not in AttentionBackendEnum._member_map_:
    register_backend("TORCH_TPU_PAGED", _ATTENTION)


class TpuPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name: str = "tpu"
    device_type: str = "tpu"
    dispatch_key: str = "PrivateUse1"
    ray_device_key: str = ""
    device_control_env_var: str = "TORCH_TPU_VISIBLE_DEVICES"
    dist_backend: str = "gloo"
    # vLLM compiles small helper functions with this backend (torch.compile).
    simple_compile_backend: str = "tpu"

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float32, torch.float16]

    @classmethod
    def get_attn_backend_cls(cls, selected_backend, attn_selector_config, num_heads=None) -> str:
        if attn_selector_config.use_mla or attn_selector_config.use_sparse:
            raise NotImplementedError("MLA and sparse attention are not supported on tpu")
        return _ATTENTION

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.tpu.get_device_name(device_id)

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        return torch.tpu.mem_get_info(device_id)[1]

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.tpu.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.tpu.manual_seed_all(seed)

    @classmethod
    def inference_mode(cls):
        return torch.no_grad()

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return False

    @classmethod
    def get_current_memory_usage(cls, device=None) -> float:
        free, total = torch.tpu.mem_get_info(device)
        return float(total - free)

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        return "vllm.distributed.device_communicators.cpu_communicator.CpuCommunicator"

    @classmethod
    def supports_structured_output(cls) -> bool:
        return False

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # The attention layers call our backend directly (no vllm custom op around it).
        return False

    @classmethod
    def check_and_update_config(cls, vllm_config) -> None:
        from vllm.config import CompilationMode, CUDAGraphMode

        parallel = vllm_config.parallel_config
        if parallel.world_size > 1:
            raise NotImplementedError("torch_tpu's vLLM plugin runs one device (world size 1)")
        parallel.worker_cls = "torch_tpu.integrations.vllm.worker.TpuWorker"
        if parallel.distributed_executor_backend in (None, "auto", "mp"):
            parallel.distributed_executor_backend = "uni"

        # Our runner pads shapes to buckets and runs the model eagerly on the device
        # (each op a cached program); vLLM's own torch.compile/CUDA-graph paths do not apply.
        comp = vllm_config.compilation_config
        comp.mode = CompilationMode.NONE
        comp.cudagraph_mode = CUDAGraphMode.NONE
        if vllm_config.model_config is not None:
            vllm_config.model_config.enforce_eager = True

        cache = vllm_config.cache_config
        if not cache.user_specified_block_size:
            cache.block_size = 16
        vllm_config.scheduler_config.async_scheduling = False

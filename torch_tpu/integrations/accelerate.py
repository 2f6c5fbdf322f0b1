"""Tells Hugging Face Accelerate to place models on tpu (Trainer trains on tpu).

Accelerate 1.15 chooses its device in `PartialState.default_device`, which knows
cuda, mps, xpu, npu, hpu, mlu, musa, sdaa and neuron but not tpu. Transformers' Trainer
(which does know tpu through `torch.accelerator`) sends batches to `tpu:0`, while
`accelerator.prepare` moves the model to Accelerate's device: the CPU. Accelerate's one
knob for a device it does not know is the `ACCELERATE_TORCH_DEVICE` variable, read when
its `PartialState` starts. We set it on import, unless the user already has, so that a
program that imports only torch and transformers trains on tpu.

A multi-process launch (torchrun, WORLD_SIZE > 1) is different: Accelerate 1.15 can
neither wrap a tpu model in DistributedDataParallel nor shard the data for it (its
distributed type stays NO), so every process would train its own replica without a
word. There we set the variable to a device string that `torch.device` rejects, whose
text says why and what to do; Accelerate raises it when it starts, before any step.
Plain PyTorch DDP under torchrun never reads the variable and is unaffected.

Known limit: `TrainingArguments(use_cpu=True)` in a process that has torch_tpu loaded
also needs `ACCELERATE_TORCH_DEVICE=cpu` (Accelerate lets the variable win over its
`cpu` flag).
"""
import os

from torch_tpu import settings

VARIABLE = "ACCELERATE_TORCH_DEVICE"
# Records the value we set, so that a child process (torchrun's workers inherit the
# launcher's environment, where torch_tpu was imported too) recomputes it for its own
# launch instead of taking our value for the user's choice.
OURS = "TORCH_TPU_SET_ACCELERATE_TORCH_DEVICE"

MULTI_PROCESS_MESSAGE = (
    "tpu: Accelerate 1.15 has no tpu distributed type, so a multi-process Trainer/Accelerate run "
    "would train unsynchronised replicas. Run one process per job (python script.py), or use "
    "PyTorch DDP directly (torch.distributed.init_process_group('tpu') + DistributedDataParallel), "
    "or, to train on the CPU (use_cpu=True), set ACCELERATE_TORCH_DEVICE=cpu")


def _world_size():
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return 1


def device_setting():
    """The value torch_tpu gives ACCELERATE_TORCH_DEVICE in this process's launch."""
    return "tpu" if _world_size() <= 1 else MULTI_PROCESS_MESSAGE


def install(platform_usable):
    """Sets ACCELERATE_TORCH_DEVICE unless the user chose one or the platform cannot start."""
    current = os.environ.get(VARIABLE)
    if not platform_usable or (current is not None and current != settings.raw(OURS)):
        return  # the user's choice, or a tpu that cannot start: leave Accelerate alone
    os.environ[VARIABLE] = os.environ[OURS] = device_setting()


def max_memory(include_cpu=True):
    """The `max_memory` dict that lets `device_map="auto"` place a model on tpu.

    Accelerate 1.15's `get_max_memory` (which Transformers' `from_pretrained(...,
    device_map="auto")` calls when `max_memory` is not given) asks a fixed list of device
    modules (npu, mlu, sdaa, musa, xpu, hpu, else cuda) for their free memory, with no
    branch through `torch.accelerator`; on a tpu host it finds no accelerator and maps
    every module to "cpu". Its keys for accelerators are device indices, and an index
    means the current accelerator to PyTorch (`torch.device(0)` is tpu:0), so handing it
    the tpu devices' free memory under their indices is all it needs:

        from torch_tpu.integrations.accelerate import max_memory
        model = AutoModelForCausalLM.from_pretrained(path, device_map="auto",
                                                     max_memory=max_memory())

    Modules that do not fit go to the CPU (`include_cpu`), as Accelerate does for cuda.
    """
    import psutil
    import torch

    budget = {i: torch.tpu.mem_get_info(i)[0] for i in range(torch.tpu.device_count())}
    if include_cpu:
        budget["cpu"] = psutil.virtual_memory().available
    return budget

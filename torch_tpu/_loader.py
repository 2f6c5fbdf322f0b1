"""`torch_tpu._loader.load()`: a name libraries call on Google's TorchTPU, here too.

Ray Train (2.60, `ray.air._internal.device_manager.tpu`) calls it before
`init_process_group("tpu_dist")` when a TorchTrainer's workers hold the "TPU"
resource, expecting it to make the `tpu_dist` process-group backend known to
torch.distributed. Importing torch_tpu (or torch alone, through the autoload
entry point) already registers the device and both backend names, so load()
only makes sure that happened, and fails with the reason if the runtime cannot
be used.
"""


def load():
    """Makes the tpu device and its `tpu` / `tpu_dist` process-group backend
    available (idempotent); returns None."""
    import torch_tpu  # noqa: F401  (registers the device and the backends)
    from torch_tpu import distributed

    distributed._register()
    if not distributed.is_registered():
        raise RuntimeError("torch_tpu: torch.distributed is not available in this PyTorch build, "
                           "so the 'tpu_dist' backend cannot be registered")

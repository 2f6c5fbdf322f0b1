"""Saves and restores the tpu random generators in Transformers' Trainer checkpoints.

Transformers 5.23's `Trainer._save_rng_state` / `_load_rng_state` keep Python's, NumPy's
and the CPU generator's state and then a fixed list of devices (cuda, xla, npu, hpu,
mlu, musa), each behind its own `is_torch_<name>_available()`: there is no
device-generic branch (none through `torch.accelerator` either), so a tpu generator is
not saved, and on resume `set_seed(args.seed)` restarts it from offset 0. Training
that draws on tpu (dropout) then continues with different masks than the uninterrupted
run would have.

Transformers' own hook for extra checkpoint state is a callback that is also an
`ExportableState`: the Trainer asks it for its `state()` when it writes each
checkpoint's trainer_state.json, and hands the loaded state back to every callback's
`on_train_begin`. This callback keeps the tpu generators' (seed, offset) there:

    from torch_tpu.integrations.transformers import TpuRngStateCallback
    trainer = Trainer(..., callbacks=[TpuRngStateCallback()])
    trainer.train(resume_from_checkpoint=...)   # tpu draws continue where they stopped

It restores at the start of a resumed run; the Trainer restores the CPU generator a
little later (after skipping the data already seen), which draws nothing on tpu, so
both land where the interrupted run was.
"""
import torch
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

STATE_NAME = "TpuRngStateCallback"


class TpuRngStateCallback(TrainerCallback, ExportableState):
    """Keeps torch.tpu's per-device generator states in Trainer checkpoints."""

    def state(self):
        # 16 bytes per device (Philox seed, offset) as plain ints: trainer_state.json is JSON.
        return {"args": {}, "attributes": {
            "tpu_rng_states": [s.tolist() for s in torch.tpu.get_rng_state_all()]}}

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            return  # a fresh run: the generators are where the user's seeding left them
        saved = state.stateful_callbacks.get(STATE_NAME)
        if isinstance(saved, list):
            saved = saved[-1]
        states = (saved or {}).get("attributes", {}).get("tpu_rng_states")
        if not states:
            return  # a checkpoint written without this callback: nothing to restore
        if len(states) != torch.tpu.device_count():
            raise RuntimeError(
                f"tpu: the checkpoint holds the generator states of {len(states)} tpu devices, "
                f"this process has {torch.tpu.device_count()}")
        torch.tpu.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in states])

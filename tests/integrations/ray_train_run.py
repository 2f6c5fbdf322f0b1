"""A Ray Train TorchTrainer run on tpu: 2 workers, DDP through prepare_model /
prepare_data_loader, checkpoints reported to Ray. Run as a script (by
test_ray_train.py) so Ray's processes never share the test interpreter.

    python ray_train_run.py STEPS_PER_RUN [resume]

The setup is the one in docs/ray.md: a logical "TPU" resource per worker on a
host whose tpu device Ray does not detect, and Ray Train's TorchTrainer with
RAY_TRAIN_V2_ENABLED=0 (Ray 2.60's V2 trainer sends workers to TPUs only as
whole TPU slices: use_tpu, topology, accelerator_type). Prints one line
`RESULT <json>` with what the test checks.
"""
import json
import os
import sys
import tempfile

import torch

EPOCHS = int(sys.argv[1])
RESUME = len(sys.argv) > 2 and sys.argv[2] == "resume"
N, BATCH, WORKERS = 16, 4, 2  # 2 steps per epoch, each on a global batch of 8


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def dataset():
    g = torch.Generator().manual_seed(3)
    return torch.utils.data.TensorDataset(torch.randn(N, 6, generator=g), torch.randn(N, 1, generator=g))


def train_fn(config):
    import ray.train
    import ray.train.torch
    import torch.distributed as dist
    from ray.train import Checkpoint

    device = ray.train.torch.get_device()
    model = make_model()
    start_epoch = 0
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:  # resuming: the state rank 0 reported last
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, "state.pt"))
        model.load_state_dict(state["model"])
        start_epoch = state["epoch"]
    model = ray.train.torch.prepare_model(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = ray.train.torch.prepare_data_loader(
        torch.utils.data.DataLoader(dataset(), batch_size=BATCH, shuffle=False))
    x_device = None
    for epoch in range(start_epoch, start_epoch + config["epochs"]):
        for x, y in loader:
            x_device = x.device.type
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, flat)
        spread = max((g - flat).abs().max().item() for g in gathered)
        metrics = {"epoch": epoch + 1, "device": str(device), "param_device": flat.device.type,
                   "batch_device": x_device, "spread": spread,
                   "accelerate_device": os.environ.get("ACCELERATE_TORCH_DEVICE"),
                   "backend": dist.get_backend()}
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if dist.get_rank() == 0:
                state = {"model": {k: v.cpu() for k, v in model.module.state_dict().items()},
                         "epoch": epoch + 1}
                torch.save(state, os.path.join(d, "state.pt"))
                checkpoint = Checkpoint.from_directory(d)
            ray.train.report(metrics, checkpoint=checkpoint)
        print(f"WORKER rank={dist.get_rank()} " + json.dumps(metrics), flush=True)


def main():
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    storage = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp()
    ray.init(num_cpus=WORKERS + 1, resources={"TPU": WORKERS}, include_dashboard=False,
             log_to_driver=True)
    scaling = ScalingConfig(num_workers=WORKERS, resources_per_worker={"CPU": 1, "TPU": 1})

    def fit(epochs, resume_from=None):
        trainer = TorchTrainer(train_fn, train_loop_config={"epochs": epochs},
                               scaling_config=scaling,
                               run_config=RunConfig(storage_path=storage),
                               resume_from_checkpoint=resume_from)
        return trainer.fit()

    if RESUME:  # half the epochs, then a second run resumes from its checkpoint
        first = fit(EPOCHS // 2)
        result = fit(EPOCHS - EPOCHS // 2, resume_from=first.checkpoint)
    else:
        result = fit(EPOCHS)
    assert result.error is None, result.error
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, "state.pt"))
    restored = make_model()
    restored.load_state_dict(state["model"])  # the reported checkpoint restores

    reference = make_model()  # one CPU process on the same global batches
    opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    x_all, y_all = dataset().tensors
    for _ in range(EPOCHS):
        for i in range(0, N, BATCH * WORKERS):
            opt.zero_grad()
            torch.nn.functional.mse_loss(reference(x_all[i:i + 8]), y_all[i:i + 8]).backward()
            opt.step()
    diff = max((a - b).abs().max().item()
               for a, b in zip(restored.state_dict().values(), reference.state_dict().values()))
    print("RESULT " + json.dumps({"metrics": {k: result.metrics[k] for k in (
        "epoch", "device", "param_device", "batch_device", "spread", "accelerate_device",
        "backend")}, "checkpoint_epoch": state["epoch"], "max_diff_vs_cpu": diff}), flush=True)
    ray.shutdown()


if __name__ == "__main__":
    main()

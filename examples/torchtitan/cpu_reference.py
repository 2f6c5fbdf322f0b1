"""The CPU reference for TorchTitan's Trainer: the same model, weights, data, loss,
gradient clipping, optimizer and learning-rate schedule, in one process on the CPU.

TorchTitan's Trainer cannot run on the CPU itself (with no accelerator it picks
`torch.cuda` and calls `torch.cuda.set_device`), and PyTorch's FlexAttention has no
backward on the CPU. So this script rebuilds one Trainer step from TorchTitan's own
parts (its train spec's model, tokenizer, dataloader, loss, optimizer and LR-scheduler
builders, and `clip_grad_norm_`), as `Trainer.train_step` composes them:

- weights: the Trainer's seed checkpoint (`--checkpoint.create_seed_checkpoint`), read
  with DCP, which the distributed run loads too;
- data: every data-parallel rank's dataloader, their batches concatenated, and the loss
  summed over all tokens and divided by their count (what FSDP's gradient reduction
  computes from the ranks' `loss_sum / global_valid_tokens`);
- attention: TorchTitan's `FlexAttentionWrapper` modules are replaced, in this model
  object only, by scaled-dot-product attention with the dense mask that the BlockMask's
  `mask_mod` defines (`create_mask`), the same function of q, k and v.

    python examples/torchtitan/cpu_reference.py --dp 2 --seed_checkpoint DIR/checkpoint/step-0 \
        -- <the Trainer's TorchTitan arguments>

prints `step N loss X` for each step.
"""
import argparse
import os
import sys

# A CPU-only process: without torch_tpu's autoload, torch.accelerator reports none, so
# create_block_mask builds the masks on the CPU, where the inputs are.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch  # noqa: E402
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.attention.flex_attention import create_mask  # noqa: E402


class DenseMaskAttention(torch.nn.Module):
    """FlexAttentionWrapper's call signature, computed as SDPA with a dense boolean mask."""

    def forward(self, q, k, v, *, block_mask, scale=None, enable_gqa=False, **_):
        b, _, lq, _ = q.shape
        mask = create_mask(block_mask.mask_mod, b, None, lq, k.shape[-2], device=q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                              enable_gqa=enable_gqa)


def use_dense_attention(model):
    """Replaces the model's FlexAttentionWrapper modules with DenseMaskAttention."""
    from torchtitan.models.attention import FlexAttentionWrapper

    for module in list(model.modules()):
        for name, child in module.named_children():
            if isinstance(child, FlexAttentionWrapper):
                setattr(module, name, DenseMaskAttention())


def build(argv, dp, seed_checkpoint):
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec

    config = ConfigManager().parse_args(argv)
    spec = get_train_spec(config.model.name)
    tokenizer = spec.build_tokenizer_fn(config)
    loaders = [spec.build_dataloader_fn(dp_world_size=dp, dp_rank=r, tokenizer=tokenizer,
                                        job_config=config) for r in range(dp)]
    model_args = spec.model_args[config.model.flavor]
    model_args.update_from_config(config)
    model = spec.model_cls(model_args)
    state = model.state_dict()
    dcp.load(state, checkpoint_id=seed_checkpoint)
    model.load_state_dict(state)
    use_dense_attention(model)
    model.train()
    dims = ParallelDims(dp_replicate=1, dp_shard=1, cp=1, tp=1, pp=1, ep=1, etp=1,
                        world_size=1)
    optimizers = spec.build_optimizers_fn([model], config.optimizer, dims)
    schedulers = spec.build_lr_schedulers_fn(optimizers, config.lr_scheduler,
                                             config.training.steps)
    return config, spec, tokenizer, loaders, model, optimizers, schedulers


def main():
    split = sys.argv.index("--") if "--" in sys.argv else len(sys.argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dp", type=int, default=1, help="the Trainer's data-parallel degree")
    parser.add_argument("--seed_checkpoint", required=True)
    args = parser.parse_args(sys.argv[1:split])
    config, spec, tokenizer, loaders, model, optimizers, schedulers = build(
        sys.argv[split + 1:], args.dp, args.seed_checkpoint)
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.distributed import utils as dist_utils

    iters = [iter(loader) for loader in loaders]
    for step in range(1, config.training.steps + 1):
        optimizers.zero_grad()
        batches = [next(it) for it in iters]
        inputs = torch.cat([b[0]["input"] for b in batches])
        labels = torch.cat([b[1] for b in batches])
        masks = model.get_attention_masks(input_batch=inputs, tokenizer=tokenizer)
        loss = cross_entropy_loss(model(inputs, attention_masks=masks), labels)
        loss = loss / (labels != -100).sum()
        loss.backward()
        grad_norm = dist_utils.clip_grad_norm_(list(model.parameters()),
                                               config.training.max_norm, foreach=True)
        optimizers.step()
        schedulers.step()
        print(f"step {step} loss {loss.item():.6f} grad_norm {grad_norm.item():.6f}",
              flush=True)


if __name__ == "__main__":
    main()

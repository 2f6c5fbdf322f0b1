"""Hugging Face tensor-parallel loading on tpu, under torchrun.

    python hf_tensor_parallel.py --save DIR     # once, one process: a tiny Llama, save_pretrained
    torchrun --nproc_per_node 2 hf_tensor_parallel.py DIR

Each rank loads DIR with `AutoModelForCausalLM.from_pretrained(DIR, tp_plan="auto")`:
transformers starts torch.distributed itself (device tpu -> backend `tpu_dist`),
shards the attention and MLP projections over the ranks and puts the model on tpu.
Its logits must equal the single-device model's (DIR loaded on the CPU, no
tensor parallelism). Each rank prints `rank <r>: HF TP OK` or raises.
"""
import os
import sys
import warnings

import torch

CONFIG = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              rms_norm_eps=1e-6, tie_word_embeddings=False)


def save(directory):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**CONFIG))
    # Random init leaves small weights; larger ones make the comparison meaningful.
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    model.save_pretrained(directory)


def main(directory):
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM
    ids = torch.tensor([[1, 5, 9, 17, 33, 60, 2, 8, 77, 41, 3, 12]])
    reference = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    with torch.no_grad():
        want = reference(ids).logits

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # tp_plan= moves to DistributedConfig
        model = AutoModelForCausalLM.from_pretrained(directory, tp_plan="auto",
                                                     dtype=torch.float32)
    rank, world = dist.get_rank(), dist.get_world_size()
    assert dist.get_backend() == "tpu_dist", dist.get_backend()
    assert model.device.type == "tpu", model.device
    q = model.model.layers[0].self_attn.q_proj.weight
    local = q.to_local() if hasattr(q, "to_local") else q
    assert local.shape[0] == CONFIG["hidden_size"] // world, (q.shape, local.shape)
    assert local.device.type == "tpu", local.device

    with torch.no_grad():
        got = model(ids.to(model.device)).logits
    if hasattr(got, "full_tensor"):
        got = got.full_tensor()
    assert got.device.type == "tpu", got.device
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    print(f"rank {rank}: HF TP OK (max |diff| {(got.cpu() - want).abs().max().item():.2e})",
          flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1] == "--save":
        save(sys.argv[2])
    else:
        main(sys.argv[1])

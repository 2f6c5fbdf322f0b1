"""The benchmarked workloads, six models:

- minGPT, the ResNet-18-style CNN, DLRM and the DDPM UNet from examples/;
- Llama and Qwen through Hugging Face's classes (transformers' LlamaForCausalLM and
  Qwen3ForCausalLM, built from small configs with random weights).

Each as a training step (forward, backward, AdamW), an inference step (forward under
no_grad; BatchNorm in eval mode), and for the two language models a decode step
(greedy generate() of a fixed number of new tokens after a fixed prompt, with the KV
cache). Every step ends by reading a value on the host and waiting for the device,
so a step's time covers its work, whatever the execution mode.

Sizes per suite size: `full` is the default suite; `quick` shrinks the models so that
the suite stays short; `smoke` (for the tests) is tiny.
"""
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

_LM = dict(full=dict(vocab=512, hidden=256, inter=512, layers=4, heads=8, kv=4, seq=128, batch=4,
                     prompt=16, new=16),
           quick=dict(vocab=256, hidden=64, inter=128, layers=1, heads=4, kv=2, seq=32, batch=4,
                      prompt=8, new=4),  # each new length is a program: few keep --quick short
           smoke=dict(vocab=128, hidden=32, inter=64, layers=1, heads=4, kv=2, seq=16, batch=2,
                      prompt=4, new=4))
SIZES = {
    "full": dict(gpt=dict(layers=4, width=256, heads=4, context=128, batch=8, vocab=65),
                 resnet=dict(width=16, image=32, batch=32, blocks=(2, 2, 2, 2)),
                 dlrm=dict(tables=(1_000_000, 100_000, 10_000, 1_000, 100, 10), dim=16, batch=256),
                 unet=dict(width=32, image=16, batch=32, timesteps=200, mults=(1, 2, 2)),
                 lm=_LM["full"]),
    # quick: one block per stage or layer, two ResNet stages, two UNet levels with
    # attention in the middle only. XLA's compile time grows with the depth (HLO
    # instructions), and a cold --quick is nearly all compiling: measured cold, Defer &
    # Fuse training compiled the UNet with attention at 4x4 too in 29 s and without it
    # in 17 s, the four-stage ResNet in 11 s and two stages in 6 s (at load ~4).
    "quick": dict(gpt=dict(layers=1, width=64, heads=4, context=32, batch=8, vocab=65),
                  resnet=dict(width=8, image=16, batch=16, blocks=(1, 1)),
                  dlrm=dict(tables=(100_000, 1_000, 100, 10), dim=16, batch=128),
                  unet=dict(width=8, image=8, batch=8, timesteps=50, mults=(1, 2), attn_res=2),
                  lm=_LM["quick"]),
    "smoke": dict(gpt=dict(layers=1, width=32, heads=2, context=16, batch=2, vocab=65),
                  resnet=dict(width=4, image=8, batch=4, blocks=(1, 1)),
                  dlrm=dict(tables=(1_000, 100, 10), dim=8, batch=16),
                  unet=dict(width=8, image=8, batch=2, timesteps=10, mults=(1, 2)),
                  lm=_LM["smoke"]),
}
MODELS = ("mingpt", "resnet", "dlrm", "unet", "llama", "qwen")
KINDS = ("train", "infer", "decode")
LANGUAGE_MODELS = ("llama", "qwen")


def kinds(model, chosen=KINDS):
    """The steps of `chosen` (run_all's --kinds) benchmarked for `model` (decode only
    for the language models). bfloat16 is not a step of its own: every step is
    measured in each precision run_all is given (--precisions fp32,bf16)."""
    return tuple(k for k in chosen if k in KINDS and (k != "decode" or model in LANGUAGE_MODELS))


def describe(model, size):
    s = SIZES[size]
    if model == "mingpt":
        g = s["gpt"]
        return f"minGPT {g['layers']} layers x {g['width']}, context {g['context']}, batch {g['batch']}"
    if model == "resnet":
        r = s["resnet"]
        name = "ResNet-18-style" if r["blocks"] == (2, 2, 2, 2) else f"ResNet, blocks {r['blocks']},"
        return f"{name} width {r['width']}, {r['image']}x{r['image']} images, batch {r['batch']}"
    if model == "dlrm":
        d = s["dlrm"]
        return f"DLRM tables {d['tables']} x {d['dim']}, batch {d['batch']}"
    if model == "unet":
        u = s["unet"]
        attn = u.get("attn_res", u["image"] // 2)
        where = "in the middle" if attn < u["image"] >> (len(u["mults"]) - 1) else f"at <= {attn}x{attn}"
        return (f"DDPM UNet width {u['width']}, {len(u['mults'])} levels, attention {where}, "
                f"{u['image']}x{u['image']} images, batch {u['batch']}")
    lm = s["lm"]
    name = "Llama (LlamaForCausalLM)" if model == "llama" else "Qwen3 (Qwen3ForCausalLM)"
    return (f"{name} {lm['layers']} layers x {lm['hidden']}, {lm['heads']} heads ({lm['kv']} kv), "
            f"seq {lm['seq']}, batch {lm['batch']}; decode {lm['new']} tokens after {lm['prompt']}")


def as_workload(hf):
    """A Hugging Face causal LM called the way the other workloads are:
    module(input_ids, labels) -> (logits, loss); the model itself is `.hf`."""
    import torch

    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.hf = hf

        def forward(self, input_ids, labels):
            out = self.hf(input_ids=input_ids, labels=labels)
            return out.logits, out.loss
    return CausalLM()


def language_model(model, size):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM
    lm = SIZES[size]["lm"]
    common = dict(vocab_size=lm["vocab"], hidden_size=lm["hidden"], intermediate_size=lm["inter"],
                  num_hidden_layers=lm["layers"], num_attention_heads=lm["heads"],
                  num_key_value_heads=lm["kv"], max_position_embeddings=2 * lm["seq"],
                  head_dim=lm["hidden"] // lm["heads"], pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)
    if model == "llama":
        return LlamaForCausalLM(LlamaConfig(**common))
    return Qwen3ForCausalLM(Qwen3Config(**common))


def build(model, size, device):
    """(module, inputs tuple, target) on `device`, the same weights and data on every
    device. The module is called as module(*inputs, target) -> (output, loss)."""
    import torch
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    s = SIZES[size]
    if model == "mingpt":
        from examples.mingpt.model import GPT, GPTConfig
        c = s["gpt"]
        net = GPT(GPTConfig(vocab_size=c["vocab"], block_size=c["context"],
                            n_layer=c["layers"], n_head=c["heads"], n_embd=c["width"]))
        x = torch.randint(0, c["vocab"], (c["batch"], c["context"]), generator=g)
        y = torch.randint(0, c["vocab"], (c["batch"], c["context"]), generator=g)
        inputs = (x,)
    elif model == "resnet":
        from examples.resnet.data import NUM_CLASSES, make_images
        from examples.resnet.model import ResNet
        c = s["resnet"]
        net = ResNet(num_classes=NUM_CLASSES, width=c["width"], blocks=c["blocks"])
        x, y = make_images(c["batch"], c["image"], g)
        inputs = (x,)
    elif model == "dlrm":
        from examples.dlrm.data import ClickLogs
        from examples.dlrm.model import DLRM
        c = s["dlrm"]
        net = DLRM(c["tables"], dim=c["dim"])
        dense, sparse, y = ClickLogs(c["tables"], test=1).make(c["batch"], g)
        inputs = (dense, sparse)
    elif model == "unet":
        from examples.unet.diffusion import Diffusion
        from examples.unet.model import UNet
        c = s["unet"]
        net = Diffusion(UNet(width=c["width"], mults=c["mults"], image=c["image"],
                             attn_res=c.get("attn_res", c["image"] // 2)),
                        steps=c["timesteps"])
        x0 = torch.rand(c["batch"], 3, c["image"], c["image"], generator=g) * 2 - 1
        t = torch.randint(0, c["timesteps"], (c["batch"],), generator=g)
        y = torch.randn(x0.shape, generator=g)
        inputs = (x0, t)
    else:
        lm = s["lm"]
        net = as_workload(language_model(model, size))
        x = torch.randint(3, lm["vocab"], (lm["batch"], lm["seq"]), generator=g)
        inputs, y = (x,), x
    return net.to(device), tuple(t.to(device) for t in inputs), y.to(device)


def make_step(net, inputs, y, kind, wrap=lambda m: m, amp="none", model=None, size=None):
    """A step function returning a Python float (the loss; for decode, the last token).
    `wrap` is torch.compile in the compiled modes: applied to the module for inference
    and decode, and to the whole training step (forward, backward, optimizer). `amp="bf16"` runs the forward under torch.autocast(bfloat16).
    A step ends when all of its device work has: reading the loss alone would let the
    optimizer update still run into the next timed step (or another process's)."""
    import torch
    device = y.device
    sync = torch.tpu.synchronize if device.type == "tpu" else (lambda: None)
    autocast = lambda: torch.autocast(device.type, dtype=torch.bfloat16,  # noqa: E731
                                      enabled=amp == "bf16")
    if kind == "decode":
        lm = SIZES[size]["lm"]
        hf = net.hf
        hf.eval()
        if wrap(hf) is not hf:  # compiled: generate() calls the compiled forward
            hf.forward = wrap(hf.forward)
        generate = hf.generate
        prompt = inputs[0][:, :lm["prompt"]]
        mask = torch.ones_like(prompt)

        def step():
            with torch.no_grad(), autocast():
                out = generate(prompt, attention_mask=mask, max_new_tokens=lm["new"],
                               min_new_tokens=lm["new"], do_sample=False, pad_token_id=0)
            value = float(out[0, -1])
            sync()
            return value
        return step
    fwd = wrap(net)
    if kind == "train":
        net.train()
        compiled = fwd is not net
        # Compiled: the whole step (forward, backward, AdamW) is compiled, as torch_xla's
        # compiled rows do. capturable=True keeps AdamW's step counts on the device, so
        # the optimizer graph is one device program too; Dynamo sets it by itself only
        # for CUDA/XPU parameters.
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4,
                                capturable=compiled and device.type == "tpu")

        def train_step():
            with autocast():
                _, loss = net(*inputs, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            return loss
        whole = wrap(train_step) if compiled else train_step

        def step():
            value = whole().item()
            sync()
            return value
    else:
        net.eval()

        def step():
            with torch.no_grad(), autocast():
                _, loss = fwd(*inputs, y)
            value = loss.item()
            sync()
            return value
    return step


def items_per_step(model, kind, size):
    """What one step processes, for throughput: tokens (language models, minGPT),
    images or examples."""
    s = SIZES[size]
    if kind == "decode":
        return s["lm"]["batch"] * s["lm"]["new"], "tokens"
    if model == "mingpt":
        return s["gpt"]["batch"] * s["gpt"]["context"], "tokens"
    if model in LANGUAGE_MODELS:
        return s["lm"]["batch"] * s["lm"]["seq"], "tokens"
    return s[model]["batch"], "examples" if model == "dlrm" else "images"

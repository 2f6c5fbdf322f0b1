"""A GPT and a CNN trained 20 steps under mixed precision on tpu: bfloat16
autocast, and float16 autocast with a GradScaler. Their losses stay within
bfloat16/float16 tolerance of the float32 run on PyTorch's CPU backend, and the
models learn. The three execution modes give the same losses under autocast."""
import os
import sys

import pytest
import torch
import torch_tpu

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402
from examples.resnet.data import NUM_CLASSES, make_images  # noqa: E402
from examples.resnet.model import ResNet  # noqa: E402

STEPS = 20
VOCAB = 17


def _gpt():
    return GPT(GPTConfig(vocab_size=VOCAB, block_size=8, n_layer=2, n_head=2, n_embd=32))


def _gpt_batches(steps):
    # Sequences that count upwards mod VOCAB from a random start: learnable in a few steps.
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        start = torch.randint(0, VOCAB, (8, 1), generator=g)
        seq = (start + torch.arange(9)) % VOCAB
        out.append((seq[:, :-1].contiguous(), seq[:, 1:].contiguous()))
    return out


def _cnn():
    return ResNet(num_classes=NUM_CLASSES, width=8, blocks=(1, 1))


def _cnn_batches(steps):
    g = torch.Generator().manual_seed(1)
    return [make_images(16, 16, g) for _ in range(steps)]


MODELS = {"gpt": (_gpt, _gpt_batches), "cnn": (_cnn, _cnn_batches)}


def train(name, device, amp=None, steps=STEPS, compile_model=False):
    """Losses of `steps` AdamW steps; amp is None, torch.bfloat16 or torch.float16
    (float16 with a GradScaler, as on CUDA)."""
    build, batches = MODELS[name]
    torch.manual_seed(0)
    model = build().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    fwd = torch.compile(model, backend="tpu") if compile_model else model
    kind = torch.device(device).type
    scaler = torch.amp.GradScaler(kind, init_scale=2.0 ** 12) if amp == torch.float16 else None
    losses = []
    for x, y in batches(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(kind, dtype=amp or torch.bfloat16, enabled=amp is not None):
            _, loss = fwd(x.to(device), y.to(device))
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        losses.append(loss.item())
    return losses


_reference = {}


def cpu_float32(name):
    if name not in _reference:
        _reference[name] = train(name, "cpu")
    return _reference[name]


def assert_tracks(losses, ref, rtol):
    worst = max(abs(a - b) / abs(b) for a, b in zip(losses, ref))
    assert worst <= rtol, (worst, losses, ref)
    # Learning: the last steps' loss is well below the first's.
    assert sum(losses[-3:]) / 3 < 0.8 * losses[0], losses


@pytest.mark.slow  # ~30 s per model and mode on two loaded cores
@pytest.mark.parametrize("name", MODELS)
def test_bf16_autocast_tracks_float32_cpu(name):
    losses = train(name, "tpu", torch.bfloat16)
    assert_tracks(losses, cpu_float32(name), rtol=5e-2)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_fp16_autocast_with_grad_scaler_tracks_float32_cpu(name):
    losses = train(name, "tpu", torch.float16)
    assert_tracks(losses, cpu_float32(name), rtol=2e-2)


@pytest.mark.strict_only
@pytest.mark.parametrize("name", ["gpt", pytest.param("cnn", marks=pytest.mark.slow)])
def test_three_modes_agree_under_autocast(name):
    eager = train(name, "tpu", torch.bfloat16, steps=6)
    with torch_tpu.execution_mode("defer_and_fuse"):
        fused = train(name, "tpu", torch.bfloat16, steps=6)
    torch._dynamo.reset()
    compiled = train(name, "tpu", torch.bfloat16, steps=6, compile_model=True)
    torch._dynamo.reset()
    for other in (fused, compiled):
        torch.testing.assert_close(torch.tensor(other), torch.tensor(eager), rtol=1e-2, atol=1e-3)

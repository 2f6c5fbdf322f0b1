"""Diffusers on tpu against the CPU: DDPM and DDIM pipelines moved with pipe.to("tpu"),
UNet2DConditionModel forward/backward with random encoder states (and compiled with
backend="tpu"), and a few training steps of a UNet2DModel."""
import copy

import diffusers
import pytest
import torch
import torch.nn.functional as F
import torch_tpu


def _unet():
    torch.manual_seed(0)
    return diffusers.UNet2DModel(
        sample_size=8, in_channels=3, out_channels=3, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"), up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=4)


def _cond_unet():
    torch.manual_seed(0)
    return diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, layers_per_block=1, block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=12,
        attention_head_dim=4, norm_num_groups=4)


@pytest.mark.parametrize("pipe_cls,sched_cls", [(diffusers.DDPMPipeline, diffusers.DDPMScheduler),
                                                (diffusers.DDIMPipeline, diffusers.DDIMScheduler)],
                         ids=["ddpm", "ddim"])
def test_pipeline_to_tpu_matches_cpu(pipe_cls, sched_cls):
    pipe = pipe_cls(unet=_unet(), scheduler=sched_cls(num_train_timesteps=10))
    pipe.set_progress_bar_config(disable=True)
    want = pipe(batch_size=2, generator=torch.Generator().manual_seed(0), num_inference_steps=4,
                output_type="np").images
    pipe.to("tpu")
    assert pipe.device.type == "tpu"
    torch_tpu.debug.reset_metrics()
    got = pipe(batch_size=2, generator=torch.Generator().manual_seed(0), num_inference_steps=4,
               output_type="np").images
    assert torch_tpu.debug.metrics()["cpu_fallback_counts"] == {}
    torch.testing.assert_close(torch.from_numpy(got), torch.from_numpy(want), rtol=1e-4, atol=1e-5)


def _cond_inputs():
    g = torch.Generator().manual_seed(1)
    return (torch.randn(2, 4, 8, 8, generator=g), torch.tensor([3, 7]),
            torch.randn(2, 5, 12, generator=g))


def test_unet2d_condition_forward_backward_matches_cpu():
    unet = _cond_unet()
    x, t, enc = _cond_inputs()
    ref = unet(x, t, encoder_hidden_states=enc).sample
    ref.square().mean().backward()
    ref_grads = {n: p.grad.clone() for n, p in unet.named_parameters() if p.grad is not None}
    unet.zero_grad(set_to_none=True)
    unet.to("tpu")
    torch_tpu.debug.reset_metrics()
    out = unet(x.to("tpu"), t.to("tpu"), encoder_hidden_states=enc.to("tpu")).sample
    out.square().mean().backward()
    assert torch_tpu.debug.metrics()["cpu_fallback_counts"] == {}
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)
    assert ref_grads
    for n, p in unet.named_parameters():
        if n in ref_grads:
            torch.testing.assert_close(p.grad.cpu(), ref_grads[n], rtol=1e-4, atol=1e-5, msg=n)


@pytest.mark.slow
def test_unet2d_condition_compiled_matches_cpu():
    unet = _cond_unet().eval()
    x, t, enc = _cond_inputs()
    with torch.no_grad():
        ref = unet(x, t, encoder_hidden_states=enc).sample
        compiled = torch.compile(unet.to("tpu"), backend="tpu")
        out = compiled(x.to("tpu"), t.to("tpu"), encoder_hidden_states=enc.to("tpu")).sample
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-4, atol=1e-5)


def _train(unet, device, steps=3):
    sched = diffusers.DDPMScheduler(num_train_timesteps=100)
    opt = torch.optim.AdamW(unet.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(4)
    clean = torch.randn(4, 3, 8, 8, generator=g)
    losses = []
    for _ in range(steps):
        noise = torch.randn(clean.shape, generator=g)
        t = torch.randint(0, 100, (4,), generator=g)
        noisy = sched.add_noise(clean, noise, t)
        pred = unet(noisy.to(device), t.to(device)).sample
        loss = F.mse_loss(pred, noise.to(device))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


def test_unet2d_training_matches_cpu():
    cpu_unet = _unet()
    tpu_unet = copy.deepcopy(cpu_unet).to("tpu")
    want, got = _train(cpu_unet, "cpu"), _train(tpu_unet, "tpu")
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    for (n, a), (_, b) in zip(tpu_unet.named_parameters(), cpu_unet.named_parameters()):
        # AdamW divides by the root of the squared gradients, so an element whose gradient
        # is rounding noise (a key bias, which softmax ignores) moves by up to lr a step on
        # either backend: parameters agree to a fraction of lr, losses to 1e-4.
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-3, atol=5e-4, msg=n)

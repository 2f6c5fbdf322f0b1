"""DDPM (Ho et al., 2020): a fixed noise schedule, the training objective (predict
the noise that was mixed into an image at a random timestep) and ancestral
sampling (start from pure noise, remove the predicted noise step by step)."""
import math

import torch
import torch.nn.functional as F
from torch import nn


def cosine_betas(steps, s=0.008):
    """Nichol & Dhariwal's cosine schedule: the kept signal alphas_bar(t) falls as
    cos^2 from 1 to 0, for any number of steps (each beta clipped below 1)."""
    t = torch.arange(steps + 1, dtype=torch.float64) / steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    return (1 - f[1:] / f[:-1]).clamp(max=0.999)


class Diffusion(nn.Module):
    """The UNet with the schedule; forward is the training loss."""

    def __init__(self, unet, steps=200):
        super().__init__()
        self.unet, self.steps = unet, steps
        betas = cosine_betas(steps)
        alphas_bar = torch.cumprod(1 - betas, dim=0)
        # float64 on the host for sampling's per-step scalars; float32 buffers for training.
        self.betas, self.alphas_bar = betas, alphas_bar
        self.register_buffer("sqrt_ab", alphas_bar.sqrt().float(), persistent=False)
        self.register_buffer("sqrt_1mab", (1 - alphas_bar).sqrt().float(), persistent=False)

    def forward(self, x0, t, noise):
        """(predicted noise, mean squared error) for clean images x0, timesteps t [B]
        and the noise drawn for them (all drawn by the caller, so that a run is
        the same on every device)."""
        a = self.sqrt_ab[t][:, None, None, None]
        s = self.sqrt_1mab[t][:, None, None, None]
        pred = self.unet(a * x0 + s * noise, t)
        return pred, F.mse_loss(pred.float(), noise)


@torch.no_grad()
def sample(fwd, diffusion, n, size, device, generator, amp_context=None, end_step=None):
    """`n` images [n, 3, size, size] in [-1, 1] on the CPU, drawn by running the
    reverse process with `fwd` (the UNet, possibly compiled). Every step has the
    same shapes, so the UNet compiles once; the per-step coefficients are Python
    floats, which never recompile either. `end_step()` runs after each step
    (harness.end_step: one Defer & Fuse graph per step)."""
    import contextlib
    ctx = amp_context or contextlib.nullcontext
    x = torch.randn(n, 3, size, size, generator=generator).to(device)
    for t in reversed(range(diffusion.steps)):
        beta = float(diffusion.betas[t])
        ab = float(diffusion.alphas_bar[t])
        ab_prev = float(diffusion.alphas_bar[t - 1]) if t > 0 else 1.0
        with ctx():
            eps = fwd(x, torch.full((n,), t, dtype=torch.long, device=device)).float()
        # The clean image the noise prediction implies, kept in the data's range
        # (an error in eps at the noisiest steps would otherwise be amplified),
        # then the mean of q(x_{t-1} | x_t, x0).
        x0 = ((x - (1 - ab) ** 0.5 * eps) / ab ** 0.5).clamp(-1, 1)
        x = (ab_prev ** 0.5 * beta / (1 - ab)) * x0 + ((1 - beta) ** 0.5 * (1 - ab_prev) / (1 - ab)) * x
        if t > 0:
            # sigma_t^2 = beta_t (1 - abar_{t-1}) / (1 - abar_t): the posterior variance.
            var = beta * (1 - ab_prev) / (1 - ab)
            x = x + var ** 0.5 * torch.randn(n, 3, size, size, generator=generator).to(device)
        if end_step:
            end_step()
    return x.clamp(-1, 1).cpu()

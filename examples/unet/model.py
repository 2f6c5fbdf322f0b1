"""A small UNet for DDPM, in plain PyTorch: residual blocks with group norm and
the timestep embedding added in, self-attention at the low resolutions, strided
convolutions down and nearest-neighbour upsampling back, with skip connections
between the two halves (Ho et al., 2020, at toy size)."""
import math

import torch
import torch.nn.functional as F
from torch import nn


def timestep_embedding(t, dim):
    """Sinusoidal features of the integer timesteps t [B] -> [B, dim]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.sin(args), torch.cos(args)], dim=1)


def norm(channels):
    return nn.GroupNorm(math.gcd(8, channels), channels)  # 8 groups where they divide


class ResBlock(nn.Module):
    def __init__(self, cin, cout, tdim):
        super().__init__()
        self.norm1, self.conv1 = norm(cin), nn.Conv2d(cin, cout, 3, padding=1)
        self.temb = nn.Linear(tdim, cout)
        self.norm2, self.conv2 = norm(cout), nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.temb(temb)[:, :, None, None]
        h = self.conv2(F.silu(self.norm2(h)))
        return self.skip(x) + h


class Attention(nn.Module):
    """Single-head self-attention over the pixels of a feature map."""

    def __init__(self, channels):
        super().__init__()
        self.norm = norm(channels)
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.out = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        b, c, h, w = x.shape
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, h * w).unbind(1)
        weights = torch.softmax(q.transpose(1, 2) @ k / math.sqrt(c), dim=-1)  # [B, HW, HW]
        y = (v @ weights.transpose(1, 2)).reshape(b, c, h, w)
        return x + self.out(y)


class UNet(nn.Module):
    """Channels `width * mult` per level; attention where the map is at most
    `attn_res` pixels wide (and in the middle)."""

    def __init__(self, channels=3, width=32, mults=(1, 2, 2), image=16, attn_res=8):
        super().__init__()
        tdim = 4 * width
        self.width = width
        self.time = nn.Sequential(nn.Linear(width, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        widths, res, c = [width], image, width
        for level, m in enumerate(mults):
            block = nn.ModuleDict({"res": ResBlock(c, width * m, tdim)})
            c = width * m
            if res <= attn_res:
                block["attn"] = Attention(c)
            if level < len(mults) - 1:
                block["down"] = nn.Conv2d(c, c, 3, stride=2, padding=1)
                res //= 2
            self.down.append(block)
            widths.append(c)
        self.mid1, self.mid_attn, self.mid2 = ResBlock(c, c, tdim), Attention(c), ResBlock(c, c, tdim)
        for level, m in reversed(list(enumerate(mults))):
            block = nn.ModuleDict({"res": ResBlock(c + widths.pop(), width * m, tdim)})
            c = width * m
            if res <= attn_res:
                block["attn"] = Attention(c)
            if level > 0:
                block["up"] = nn.Conv2d(c, c, 3, padding=1)
                res *= 2
            self.up.append(block)
        self.head = nn.Sequential(norm(c + widths.pop()), nn.SiLU(),
                                  nn.Conv2d(c + width, channels, 3, padding=1))

    def forward(self, x, t):
        """The predicted noise in x [B, C, H, W] at integer timesteps t [B]."""
        temb = self.time(timestep_embedding(t, self.width))
        h = self.stem(x)
        skips = [h]
        for block in self.down:
            h = block["res"](h, temb)
            if "attn" in block:
                h = block["attn"](h)
            skips.append(h)
            if "down" in block:
                h = block["down"](h)
        h = self.mid2(self.mid_attn(self.mid1(h, temb)), temb)
        for block in self.up:
            h = block["res"](torch.cat([h, skips.pop()], dim=1), temb)
            if "attn" in block:
                h = block["attn"](h)
            if "up" in block:
                h = block["up"](F.interpolate(h, scale_factor=2, mode="nearest"))
        return self.head(torch.cat([h, skips.pop()], dim=1))

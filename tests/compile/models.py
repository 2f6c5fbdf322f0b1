"""Tiny models for the torch.compile tests (fast on two shared cores)."""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from examples.mingpt.model import GPT, GPTConfig  # noqa: E402,F401


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 16), nn.ReLU(),
                         nn.Linear(16, 4))


def small_gpt():
    return GPT(GPTConfig(vocab_size=17, block_size=8, n_layer=2, n_head=2, n_embd=16))


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, stride=2)
        self.fc = nn.Linear(6 * 3 * 3, 5)

    def forward(self, x):
        x = F.relu(self.bn(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(x.flatten(1))


class RunningMean(nn.Module):
    """A forward that mutates its buffers: a step counter and a decayed sum."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros(()))
        self.register_buffer("ema", torch.zeros(4))

    def forward(self, x):
        self.steps += 1
        self.ema.mul_(0.9).add_(x.mean(0), alpha=0.1)
        return self.lin(x) + self.ema


class BreakInTheMiddle(nn.Module):
    """Two halves separated by a graph break (a host read Dynamo cannot trace)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Sequential(nn.Linear(6, 12), nn.Tanh())
        self.b = nn.Sequential(nn.Linear(12, 3))

    def forward(self, x):
        h = self.a(x)
        torch._dynamo.graph_break()
        scale = 2.0 if h.sum().item() > 0 else 0.5  # data-dependent Python
        return self.b(h * scale)

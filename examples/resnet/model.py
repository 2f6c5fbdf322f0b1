"""A ResNet-18-style network in plain PyTorch for small images: a 3x3 stem, four
stages of two basic residual blocks (widths w, 2w, 4w, 8w; the last three halve
the resolution), global average pooling and a linear classifier. `width=64` is
ResNet-18's own width; the examples default to less so that CPUs train it quickly."""
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a residual connection; a 1x1 strided
    convolution matches the shortcut when the block changes width or resolution."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


class ResNet(nn.Module):
    def __init__(self, num_classes=10, width=16, blocks=(2, 2, 2, 2), in_channels=3):
        super().__init__()
        # Small images: a 3x3 stem without ImageNet's 7x7/stride-2 stem and max pool,
        # which would leave too few pixels for four stages.
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, padding=1, bias=False),
                                  nn.BatchNorm2d(width), nn.ReLU())
        stages, cin = [], width
        for i, n in enumerate(blocks):
            cout = width * 2 ** i
            for j in range(n):
                stages.append(BasicBlock(cin, cout, stride=2 if i > 0 and j == 0 else 1))
                cin = cout
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x, targets=None):
        """Logits, and the cross-entropy loss when `targets` are given (the same
        interface as the minGPT model, so one training loop serves both)."""
        logits = self.fc(self.pool(self.stages(self.stem(x))).flatten(1))
        loss = None if targets is None else F.cross_entropy(logits, targets)
        return logits, loss

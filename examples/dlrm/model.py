"""DLRM (Naumov et al., 2019) in plain PyTorch: a bottom MLP over the dense
features, one nn.EmbeddingBag per categorical table (a bag of ids summed into
one vector), the pairwise dot products of all those vectors (the interaction
layer, the lower triangle of Z Z^T picked with torch.tril_indices), and a top
MLP that turns them into a click logit.
"""
import torch
import torch.nn.functional as F
from torch import nn


def mlp(sizes, last_activation=True):
    layers = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class DLRM(nn.Module):
    def __init__(self, tables, dense_in=13, dim=16, bottom=(64, 32), top=(64, 32),
                 sparse=False):
        super().__init__()
        self.bottom = mlp((dense_in, *bottom, dim))
        # Id 0 pads each bag to a fixed length and contributes nothing. sparse=True
        # makes the tables' gradients sparse tensors (only the rows a batch used).
        self.tables = nn.ModuleList(
            nn.EmbeddingBag(n, dim, mode="sum", padding_idx=0, sparse=sparse) for n in tables)
        for t in self.tables:  # small rows: a bag's sum starts near zero
            nn.init.uniform_(t.weight, -0.05, 0.05)
        self.features = len(tables) + 1
        pairs = self.features * (self.features - 1) // 2
        self.top = mlp((dim + pairs, *top, 1), last_activation=False)

    def interact(self, x, embedded):
        """The bottom MLP's output beside every pairwise dot product of the
        feature vectors (each pair once: the strict lower triangle)."""
        z = torch.stack([x] + embedded, dim=1)              # [B, F, D]
        dots = torch.bmm(z, z.transpose(1, 2))              # [B, F, F]
        i, j = torch.tril_indices(self.features, self.features, offset=-1, device=z.device)
        return torch.cat([x, dots[:, i, j]], dim=1)

    def forward(self, dense, sparse, clicks):
        """(logits [B], mean binary cross-entropy) for dense [B, 13], sparse
        [B, tables, hot] ids and clicks [B] in {0, 1}."""
        x = self.bottom(dense)
        embedded = [table(sparse[:, k]) for k, table in enumerate(self.tables)]
        logits = self.top(self.interact(x, embedded)).squeeze(1)
        return logits, F.binary_cross_entropy_with_logits(logits.float(), clicks)

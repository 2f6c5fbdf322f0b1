"""DLRM with TorchRec's sparse stack: the same model as model.py (bottom MLP, one
table per categorical feature, pairwise-dot interaction, top MLP), its tables an
EmbeddingBagCollection fed a KeyedJaggedTensor, as TorchRec models are written.

The click logs (data.py) hold each bag as ids padded with 0 to a fixed width; the
model turns them into a KeyedJaggedTensor on the device: feature-major ids, one length
per (feature, example), and per-id weights (1 for an id, 0 for padding; the tables are
weighted, as TorchRec's position-weighted features are). Keeping the padding with
weight 0 gives every batch one shape, so each program compiles once; dropping it
(`jagged(..., drop_padding=True)`) gives bags of varying total length, a new shape,
and new programs, every step. TorchRec and fbgemm's jagged ops (offsets from lengths,
splitting per feature) run on tpu like any op.
"""
import torch
import torch.nn.functional as F
from torch import nn
from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

from examples.dlrm.model import mlp


class TorchRecDLRM(nn.Module):
    def __init__(self, tables, dense_in=13, dim=16, bottom=(64, 32), top=(64, 32)):
        super().__init__()
        self.bottom = mlp((dense_in, *bottom, dim))
        self.keys = [f"f{k}" for k in range(len(tables))]
        self.ebc = EmbeddingBagCollection(
            tables=[EmbeddingBagConfig(name=f"t{k}", embedding_dim=dim, num_embeddings=n,
                                       feature_names=[key])
                    for k, (n, key) in enumerate(zip(tables, self.keys))],
            is_weighted=True, device=torch.device("cpu"))
        for w in self.ebc.parameters():  # small rows: a bag's sum starts near zero
            nn.init.uniform_(w, -0.05, 0.05)
        self.features = len(tables) + 1
        pairs = self.features * (self.features - 1) // 2
        self.top = mlp((dim + pairs, *top, 1), last_activation=False)

    def jagged(self, sparse, drop_padding=False):
        """[B, tables, hot] ids padded with 0 -> the KeyedJaggedTensor of the bags."""
        by_feature = sparse.transpose(0, 1)            # [tables, B, hot]
        present = by_feature != 0
        if drop_padding:
            return KeyedJaggedTensor(keys=self.keys, values=by_feature[present],
                                     lengths=present.sum(-1).flatten(),
                                     weights=torch.ones(int(present.sum()), device=sparse.device))
        return KeyedJaggedTensor(
            keys=self.keys, values=by_feature.flatten(), weights=present.flatten().float(),
            lengths=torch.full(by_feature.shape[:2], by_feature.shape[2],
                               device=sparse.device).flatten())

    def forward(self, dense, sparse, clicks):
        """(logits [B], mean binary cross-entropy), as DLRM.forward."""
        x = self.bottom(dense)
        pooled = self.ebc(self.jagged(sparse)).to_dict()
        z = torch.stack([x] + [pooled[k] for k in self.keys], dim=1)   # [B, F, D]
        dots = torch.bmm(z, z.transpose(1, 2))
        i, j = torch.tril_indices(self.features, self.features, offset=-1, device=z.device)
        logits = self.top(torch.cat([x, dots[:, i, j]], dim=1)).squeeze(1)
        return logits, F.binary_cross_entropy_with_logits(logits.float(), clicks)

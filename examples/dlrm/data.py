"""Generated click logs with a signal a recommender can learn.

Each example has 13 dense features and one bag of categorical ids per table (a
user's recent items, a page, a device...), drawn the way real logs are: a few ids
are frequent and most are rare (Zipf-like: id k has probability about 1/k), and a bag holds
between one and `hot` ids. Id 0 is the padding id that fills the rest of a bag,
so every batch has the same shapes.

Whether an example is a click is drawn from a hidden logistic model: a linear
term in the dense features, a per-id effect summed over each bag, and a
pairwise term, the dot product of two tables' hidden id vectors (what DLRM's
interaction layer is built to find). A model has to learn the id effects from
the frequent ids; a constant predictor scores AUC 0.5.
"""
import torch

DENSE = 13
LATENT = 4  # width of the hidden id vectors in the pairwise term


def default_tables():
    """Mixed sizes, one of a million rows (the big item table of a real model)."""
    return (1_000_000, 100_000, 10_000, 1_000, 100, 10)


class ClickLogs:
    def __init__(self, tables, hot=4, test=4096, seed=0):
        self.tables = tuple(tables)
        self.hot = hot
        g = torch.Generator().manual_seed(seed + 12345)  # the hidden model
        self.dense_w = torch.randn(DENSE, generator=g) * 0.4
        self.effects = [torch.randn(n, generator=g) * 0.6 for n in self.tables]
        for e in self.effects:
            e[0] = 0.0  # padding carries no signal
        pair = self.tables[:2] if len(self.tables) >= 2 else self.tables * 2
        self.latent = [torch.randn(n, LATENT, generator=g) * 0.6 for n in pair]
        self.bias = -0.5  # fewer clicks than not, as in real logs
        self.test = self.make(test, torch.Generator().manual_seed(seed + 999))

    def ids(self, n, size, g):
        """[n, hot] ids of one table: log-uniform over 1..size-1, padded with 0."""
        u = torch.rand(n, self.hot, generator=g, dtype=torch.float64)
        ids = torch.pow(float(size - 1), u).long().clamp(1, size - 1)
        length = torch.randint(1, self.hot + 1, (n, 1), generator=g)
        return torch.where(torch.arange(self.hot)[None] < length, ids, 0)

    def make(self, n, g):
        """(dense [n, 13] float32, sparse [n, tables, hot] int64, clicks [n] float32)."""
        dense = torch.randn(n, DENSE, generator=g)
        sparse = torch.stack([self.ids(n, size, g) for size in self.tables], dim=1)
        logit = dense @ self.dense_w + self.bias
        for t, e in enumerate(self.effects):
            logit = logit + e[sparse[:, t]].sum(1)
        a, b = (lat[sparse[:, k]].sum(1) for k, lat in enumerate(self.latent))
        logit = logit + (a * b).sum(1)
        clicks = torch.bernoulli(torch.sigmoid(logit), generator=g)
        return dense, sparse, clicks

    def batch(self, n, generator):
        """A fresh batch of training logs on the CPU (the trainer moves it)."""
        return self.make(n, generator)

    def test_batches(self, batch):
        """The held-out logs in order, in equal-sized batches (one shape, one compile)."""
        dense, sparse, clicks = self.test
        for i in range(0, len(clicks) - batch + 1, batch):
            yield dense[i:i + batch], sparse[i:i + batch], clicks[i:i + batch]


def auc(scores, labels):
    """Area under the ROC curve: the chance that a random click scores above a
    random non-click (Mann-Whitney, ties counted half)."""
    scores, labels = scores.double().cpu(), labels.bool().cpu()
    order = torch.argsort(scores)
    ranks = torch.empty_like(scores)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64)
    # Tied scores share their mean rank.
    uniq, inverse = torch.unique(scores, return_inverse=True)
    if len(uniq) < len(scores):
        sums = torch.zeros(len(uniq), dtype=torch.float64).index_add_(0, inverse, ranks)
        counts = torch.bincount(inverse, minlength=len(uniq)).double()
        ranks = (sums / counts)[inverse]
    pos = int(labels.sum())
    neg = len(labels) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))

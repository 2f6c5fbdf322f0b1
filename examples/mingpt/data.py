"""The character-level data for the minGPT example: the shipped corpus, its
vocabulary, and random training windows."""
import os

import torch

CORPUS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus.txt")


class CharData:
    """The corpus as token ids; `batch` draws windows and their next-character targets."""

    def __init__(self, path=CORPUS):
        if not os.path.exists(path):  # a checkout that dropped the generated file
            from .make_corpus import corpus
            text = corpus(12000, 7)
        else:
            with open(path) as f:
                text = f.read()
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}
        self.ids = torch.tensor([self.index[c] for c in text], dtype=torch.long)

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, text):
        return [self.index[c] for c in text if c in self.index]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)

    def batch(self, batch, context, generator):
        """(inputs, targets) on the CPU, each [batch, context]: the loader's job ends on
        the host, as with a real data loader; the trainer moves them to the device."""
        starts = torch.randint(0, len(self.ids) - context - 1, (batch,), generator=generator)
        rows = starts[:, None] + torch.arange(context + 1)[None, :]
        window = self.ids[rows]
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()

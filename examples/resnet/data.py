"""A generated image set that a small CNN can learn: each image is a striped
pattern (a sinusoidal grating) whose orientation and stripe frequency give its
class, five orientations x two frequencies = ten classes. Phase, colour, contrast
and noise vary at random, so neither the mean colour nor any single pixel tells
the class: the network has to learn oriented filters, as on real images."""
import math

import torch

ORIENTATIONS = 5
FREQUENCIES = (2.0, 5.0)  # stripes per image width
NUM_CLASSES = ORIENTATIONS * len(FREQUENCIES)


def make_images(n, size, generator):
    """(images [n, 3, size, size] float32, labels [n] int64), on the CPU."""
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=generator)
    angle = (labels % ORIENTATIONS).float() * (math.pi / ORIENTATIONS)
    freq = torch.tensor(FREQUENCIES)[labels // ORIENTATIONS]
    # Small random tilt so orientations are bands, not five exact angles.
    angle = angle + 0.08 * torch.randn(n, generator=generator)
    phase = 2 * math.pi * torch.rand(n, generator=generator)
    coords = torch.linspace(0, 1, size)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    proj = (xx[None] * torch.cos(angle)[:, None, None] + yy[None] * torch.sin(angle)[:, None, None])
    wave = torch.sin(2 * math.pi * freq[:, None, None] * proj + phase[:, None, None])
    colour = torch.rand(n, 3, 1, 1, generator=generator) * 2 - 1  # uninformative tint
    contrast = 0.5 + torch.rand(n, 1, 1, 1, generator=generator)
    images = contrast * wave[:, None] * (0.5 + 0.5 * colour.abs()) + 0.3 * colour
    images = images + 0.3 * torch.randn(n, 3, size, size, generator=generator)
    return images.float(), labels


class ImageData:
    """A fixed training set and a held-out evaluation set drawn from the same recipe."""

    def __init__(self, size=32, train=2048, test=512, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.size = size
        self.train_x, self.train_y = make_images(train, size, g)
        self.test_x, self.test_y = make_images(test, size, g)

    def batch(self, batch, generator):
        """A random training batch on the CPU (the trainer moves it to the device)."""
        idx = torch.randint(0, len(self.train_y), (batch,), generator=generator)
        return self.train_x[idx], self.train_y[idx]

    def test_batches(self, batch):
        """The evaluation set in order, in equal-sized batches (one shape, one compile);
        a remainder smaller than `batch` is left out."""
        for i in range(0, len(self.test_y) - batch + 1, batch):
            yield self.test_x[i:i + batch], self.test_y[i:i + batch]

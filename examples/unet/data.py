"""Generated images for the diffusion model: one coloured shape (a disc, a square
or a triangle) of random size, position and colour on a dark, slightly noisy
background. Simple enough that a small model learns it in minutes, varied enough
that its samples show whether it did: crisp single shapes in clean colours, not
blurs."""
import torch

COLOURS = torch.tensor([[1.0, 0.2, 0.2], [0.2, 0.9, 0.2], [0.25, 0.4, 1.0],
                        [1.0, 0.85, 0.1], [0.9, 0.3, 0.9], [0.1, 0.9, 0.9]])


def make_shapes(n, size, generator):
    """[n, 3, size, size] float32 images in [-1, 1], on the CPU."""
    g = generator
    coords = (torch.arange(size, dtype=torch.float32) + 0.5) / size
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    kind = torch.randint(0, 3, (n,), generator=g)
    radius = 0.18 + 0.14 * torch.rand(n, generator=g)
    cx = radius + (1 - 2 * radius) * torch.rand(n, generator=g)
    cy = radius + (1 - 2 * radius) * torch.rand(n, generator=g)
    dx = xx[None] - cx[:, None, None]
    dy = yy[None] - cy[:, None, None]
    r = radius[:, None, None]
    disc = dx.square() + dy.square() <= r.square()
    square = (dx.abs() <= 0.85 * r) & (dy.abs() <= 0.85 * r)
    # An upward triangle: below the apex, inside the two slanted edges.
    triangle = (dy <= r) & (dy >= -r) & (dx.abs() <= (dy + r) / 2)
    mask = torch.where((kind == 0)[:, None, None], disc,
                       torch.where((kind == 1)[:, None, None], square, triangle))
    colour = COLOURS[torch.randint(0, len(COLOURS), (n,), generator=g)]
    background = 0.1 * torch.rand(n, 3, 1, 1, generator=g)
    images = torch.where(mask[:, None], colour[:, :, None, None], background)
    images = images + 0.02 * torch.randn(n, 3, size, size, generator=g)
    return (images.clamp(0, 1) * 2 - 1).float()


class ShapeData:
    """A fixed training set of shapes."""

    def __init__(self, size=16, train=4096, seed=0):
        self.size = size
        self.images = make_shapes(train, size, torch.Generator().manual_seed(seed))

    def batch(self, batch, generator):
        idx = torch.randint(0, len(self.images), (batch,), generator=generator)
        return self.images[idx]

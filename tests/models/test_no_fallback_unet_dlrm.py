"""A UNet block and a DLRM-style recommender run forward and backward (and a
fused AdamW step) on tpu with no CPU fallback, and match CPU (float32)."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import torch_tpu


class UNetBlock(nn.Module):
    """Down path (conv, GroupNorm, SiLU, reflect padding), bottleneck, up path with
    a transposed conv and a bilinear upsample, skip connections by cat."""

    def __init__(self, c=4):
        super().__init__()
        self.inc = nn.Conv2d(3, c, 3, padding=1, padding_mode="reflect")
        self.gn1 = nn.GroupNorm(2, c)
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.gn2 = nn.GroupNorm(2, 2 * c)
        self.mid = nn.Conv2d(2 * c, 2 * c, 3, padding=1, padding_mode="replicate")
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.fuse = nn.Conv2d(2 * c, c, 3, padding=1)
        self.side = nn.Conv2d(2 * c, c, 1)
        self.out = nn.Conv2d(2 * c, 2, 1)

    def forward(self, x):
        s1 = F.silu(self.gn1(self.inc(x)))
        s2 = F.silu(self.gn2(self.down(s1)))
        m = F.gelu(self.mid(s2)) + s2
        u = self.fuse(torch.cat([self.up(m), s1], 1))
        v = F.interpolate(self.side(m), scale_factor=2, mode="bilinear", align_corners=False)
        w = F.interpolate(self.side(m), scale_factor=2, mode="nearest")
        return self.out(torch.cat([u + w, v], 1))


class DLRM(nn.Module):
    """Dense MLP, EmbeddingBag tables (sum and mean), pairwise dot interaction by
    bmm, top MLP with a sigmoid output."""

    def __init__(self, dense=5, d=8, tables=(20, 15, 12)):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 16), nn.ReLU(), nn.Linear(16, d), nn.ReLU())
        self.embs = nn.ModuleList(nn.EmbeddingBag(n, d, mode="sum" if i % 2 == 0 else "mean")
                                  for i, n in enumerate(tables))
        f = len(tables) + 1
        self.top = nn.Sequential(nn.Linear(d + f * (f - 1) // 2, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense, indices, offsets):
        x = self.bottom(dense)
        feats = [x] + [e(i, o) for e, i, o in zip(self.embs, indices, offsets)]
        t = torch.stack(feats, 1)                      # [B, F, D]
        z = torch.bmm(t, t.transpose(1, 2))            # [B, F, F]
        r, c = torch.triu_indices(t.shape[1], t.shape[1], 1)
        inter = z[:, r.to(z.device), c.to(z.device)]
        return torch.sigmoid(self.top(torch.cat([x, inter], 1))).squeeze(1)


def _train_step(model, args, loss_fn, device):
    m = model.to(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2, fused=True)
    torch_tpu.debug.reset_metrics()
    out = m(*[a.to(device) if isinstance(a, torch.Tensor) else [t.to(device) for t in a] for a in args])
    loss = loss_fn(out)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()}
    opt.step()
    return out, loss, grads, dict(m.named_parameters())


def _compare(model, args, loss_fn):
    cpu_model = copy.deepcopy(model)
    out, loss, grads, params = _train_step(model, args, loss_fn, "tpu")
    m = torch_tpu.debug.metrics()
    assert m["cpu_fallback_ops"] == 0, m["cpu_fallback_counts"]
    out_c, loss_c, grads_c, params_c = _train_step(cpu_model, args, loss_fn, "cpu")
    torch.testing.assert_close(out.detach().cpu(), out_c.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss.detach().cpu(), loss_c.detach(), rtol=1e-4, atol=1e-4)
    for n, g in grads_c.items():
        torch.testing.assert_close(grads[n].cpu(), g, rtol=1e-3, atol=1e-4, msg=n)
    for n, p in params_c.items():
        torch.testing.assert_close(params[n].detach().cpu(), p.detach(), rtol=1e-3, atol=1e-4, msg=n)


def test_unet_block_no_fallback():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    target = torch.randn(2, 2, 8, 8)
    _compare(UNetBlock(), (x,), lambda out: F.mse_loss(out, target.to(out.device)))


def test_dlrm_no_fallback():
    torch.manual_seed(0)
    b = 6
    dense = torch.randn(b, 5)
    indices, offsets = [], []
    for n in (20, 15, 12):
        lens = torch.randint(0, 4, (b,))
        offsets.append(torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)[:-1]]))
        indices.append(torch.randint(0, n, (int(lens.sum()),)))
    y = torch.randint(0, 2, (b,)).float()
    _compare(DLRM(), (dense, indices, offsets),
             lambda out: F.binary_cross_entropy(out, y.to(out.device)))

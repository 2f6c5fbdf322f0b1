"""A tiny GPT block and a tiny ResNet-style CNN run forward and backward on tpu
with no CPU fallback, and match CPU (float32)."""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_tpu

V, D, H, T = 40, 32, 4, 8


class GPTBlock(nn.Module):
    def __init__(self, p_drop=0.0, sdpa=True):
        super().__init__()
        self.tok, self.pos = nn.Embedding(V, D), nn.Embedding(T, D)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.fc, self.fc2 = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)
        self.drop = nn.Dropout(p_drop)
        self.head = nn.Linear(D, V, bias=False)
        self.sdpa = sdpa

    def attend(self, q, k, v):
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        t = q.shape[-2]
        s = (q @ k.transpose(-2, -1)) / (q.shape[-1] ** 0.5)
        mask = torch.ones(t, t, device=q.device, dtype=torch.bool).tril()
        return self.drop(s.masked_fill(~mask, float("-inf")).softmax(-1)) @ v

    def forward(self, idx):
        b, t = idx.shape
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
        a = self.attend(q, k, v).transpose(1, 2).reshape(b, t, D)
        x = x + self.drop(self.proj(a))
        x = x + self.drop(self.fc2(F.gelu(self.fc(self.ln2(x)))))
        return self.head(self.lnf(x))


class TinyResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn0 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.c1, self.bn1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.c2, self.bn2 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.down = nn.Conv2d(8, 16, 1, stride=2)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.bn0(self.stem(x))))
        y = F.relu(self.bn1(self.c1(x)))
        x = F.relu(x + self.bn2(self.c2(y)))
        return self.fc(torch.flatten(self.gap(self.down(x)), 1))


def run(model, inputs, target, device):
    m = model.to(device)
    torch_tpu.debug.reset_metrics()
    out = m(inputs.to(device))
    loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), target.to(device).reshape(-1))
    loss.backward()
    return out, loss, {n: p.grad for n, p in m.named_parameters()}


def compare(model, inputs, target):
    cpu_model = copy.deepcopy(model)
    out, loss, grads = run(model, inputs, target, "tpu")
    m = torch_tpu.debug.metrics()
    assert m["cpu_fallback_ops"] == 0, m["cpu_fallback_counts"]
    out_c, loss_c, grads_c = run(cpu_model, inputs, target, "cpu")
    torch.testing.assert_close(out.detach().cpu(), out_c.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(loss.detach().cpu(), loss_c.detach(), rtol=1e-4, atol=1e-4)
    for n, g in grads_c.items():
        torch.testing.assert_close(grads[n].cpu(), g, rtol=1e-3, atol=1e-4, msg=n)
    return model, cpu_model


@pytest.mark.parametrize("sdpa", [True, False])
def test_gpt_block_no_fallback(sdpa):
    torch.manual_seed(0)
    idx = torch.randint(0, V, (2, T))
    compare(GPTBlock(sdpa=sdpa), idx, torch.roll(idx, -1, 1))


def test_gpt_block_dropout_train_no_fallback():
    torch.manual_seed(0)
    model = GPTBlock(p_drop=0.1, sdpa=False).to("tpu")
    idx = torch.randint(0, V, (2, T)).to("tpu")
    torch_tpu.debug.reset_metrics()
    loss = F.cross_entropy(model(idx).reshape(-1, V), idx.reshape(-1))
    loss.backward()
    m = torch_tpu.debug.metrics()
    assert m["cpu_fallback_ops"] == 0, m["cpu_fallback_counts"]
    assert torch.isfinite(model.qkv.weight.grad.cpu()).all()


def test_resnet_train_and_eval_no_fallback():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 16, 16)
    y = torch.randint(0, 10, (4,))
    tpu_model, cpu_model = compare(TinyResNet(), x, y)
    for a, b in zip(tpu_model.buffers(), cpu_model.buffers()):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5)
    tpu_model.eval()
    cpu_model.eval()
    torch_tpu.debug.reset_metrics()
    with torch.no_grad():
        out = tpu_model(x.to("tpu"))
    assert torch_tpu.debug.metrics()["cpu_fallback_ops"] == 0
    torch.testing.assert_close(out.cpu(), cpu_model(x).detach(), rtol=1e-4, atol=1e-4)

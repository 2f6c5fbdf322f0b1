"""EmbeddingBag lowerings (csrc/lower/embedding_bag.cc) against PyTorch CPU."""
import pytest
import torch
import torch.nn.functional as F

from lower_check import check

torch.manual_seed(0)
W = torch.randn(10, 4)
IDX = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 7])
OFF = torch.tensor([0, 4, 4, 7])  # bag 1 is empty


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_offsets(mode):
    check(lambda w: F.embedding_bag(IDX.to(w.device), w, OFF.to(w.device), mode=mode), W)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_2d_input_and_padding(mode):
    idx = torch.tensor([[1, 2, 3], [4, 2, 2], [0, 9, 3]])
    check(lambda w: F.embedding_bag(idx.to(w.device), w, mode=mode, padding_idx=2), W)


def test_embedding_bag_per_sample_weights_and_last_offset():
    psw = torch.rand(10)
    off = torch.tensor([0, 3, 3, 8, 10])
    check(lambda w, p: F.embedding_bag(IDX.to(w.device), w, off.to(w.device), mode="sum",
                                       per_sample_weights=p, include_last_offset=True), W, psw)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq(mode):
    """Checked against embedding + bag sums on CPU: PyTorch's CPU embedding_bag
    backward divides by the frequency of the wrong index (each row's gradient
    must be divided by how often that row occurs, as F.embedding does)."""
    bag = torch.tensor([0, 0, 0, 0, 2, 2, 2, 3, 3, 3])
    member = torch.zeros(4, 10)
    member[bag, torch.arange(10)] = 1.0
    if mode == "mean":
        member = member / member.sum(1, keepdim=True).clamp(min=1)
    w_cpu = W.clone().requires_grad_(True)
    ref = member @ F.embedding(IDX, w_cpu, scale_grad_by_freq=True)
    g = torch.randn(ref.shape)
    (ref * g).sum().backward()
    w = W.to("tpu").requires_grad_(True)
    out = F.embedding_bag(IDX.to("tpu"), w, OFF.to("tpu"), mode=mode, scale_grad_by_freq=True)
    (out * g.to("tpu")).sum().backward()
    torch.testing.assert_close(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad, rtol=1e-5, atol=1e-5)


def test_embedding_bag_module_forward_only():
    bag = torch.nn.EmbeddingBag(10, 4, mode="mean")
    with torch.no_grad():
        check(lambda w: F.embedding_bag(IDX.to(w.device), w, OFF.to(w.device), mode="mean"),
              bag.weight, grad=False)


@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renorm(norm_type):
    """max_norm renormalises the looked-up rows of the table in place."""
    idx = torch.tensor([[1, 2, 2], [9, 0, 1]])
    w = W * 3
    wt = w.to("tpu")
    out = F.embedding_bag(idx.to("tpu"), wt, mode="sum", max_norm=1.5, norm_type=norm_type)
    ref_w = w.clone()
    ref = F.embedding_bag(idx, ref_w, mode="sum", max_norm=1.5, norm_type=norm_type)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.cpu(), ref_w, rtol=1e-5, atol=1e-5)

"""Sparse tensors and sparse embedding gradients are refused on tpu with an error
that names the dense alternative (never a silently dense gradient, never
PyTorch's bare "could not run ... Sparsetpu"); the dense alternative trains with
SGD and Adagrad and matches the CPU."""
import pytest
import torch
from torch import nn

import torch_tpu
from conftest import assert_close_cpu

DENSE_HINT = r"sparse=False"
IDX = [[1, 2, 0], [3, 4, 4]]


def _backward(module):
    module(torch.tensor(IDX, device="tpu")).sum().backward()
    torch.tpu.synchronize()


@pytest.mark.parametrize("cls", [nn.Embedding, nn.EmbeddingBag])
def test_sparse_embedding_gradient_is_refused(cls):
    m = cls(10, 4, sparse=True).to("tpu")
    with pytest.raises(NotImplementedError, match=DENSE_HINT):
        _backward(m)


def test_sparse_embedding_bag_compiled_is_refused():
    m = nn.EmbeddingBag(10, 4, sparse=True).to("tpu")
    f = torch.compile(m, backend="tpu")
    with pytest.raises(Exception, match=DENSE_HINT):
        f(torch.tensor(IDX, device="tpu")).sum().backward()
        torch.tpu.synchronize()


def test_sparse_tensor_to_tpu_is_refused():
    s = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.tensor([1.0, 2.0]), (3,))
    with pytest.raises(NotImplementedError, match=r"to_dense\(\)"):
        s.to("tpu")
    with pytest.raises(NotImplementedError, match="sparse tensors are not supported on tpu"):
        torch.sparse_coo_tensor(torch.tensor([[0]]), torch.tensor([1.0]), (3,), device="tpu")
    assert_close_cpu(s.to_dense().to("tpu"), s.to_dense())


@pytest.mark.parametrize("cls", [nn.Embedding, nn.EmbeddingBag])
@pytest.mark.parametrize("optim", [torch.optim.SGD, torch.optim.Adagrad])
def test_dense_alternative_trains_as_on_cpu(cls, optim):
    torch.manual_seed(0)
    cpu = cls(10, 4, sparse=False)
    tpu = cls(10, 4, sparse=False).to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    opts = [optim(m.parameters(), lr=0.1) for m in (cpu, tpu)]
    torch_tpu.debug.reset_metrics()
    for _ in range(2):
        for m, opt, dev in ((cpu, opts[0], "cpu"), (tpu, opts[1], "tpu")):
            opt.zero_grad()
            m(torch.tensor(IDX, device=dev)).square().sum().backward()
            opt.step()
    assert_close_cpu(tpu.weight.detach(), cpu.weight.detach())
    assert torch_tpu.debug.metrics()["cpu_fallback_ops"] == 0

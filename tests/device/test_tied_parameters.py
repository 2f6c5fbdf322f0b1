"""Tied parameters stay one Parameter when a module moves to tpu and back."""
import torch

import torch_tpu  # noqa: F401


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(self.emb(idx)).sum()


def test_tied_parameters_survive_to_tpu_and_back():
    m = Tied()
    ref = Tied()
    ref.load_state_dict(m.state_dict())
    m.to("tpu")
    assert m.head.weight is m.emb.weight
    assert m.head.weight.device.type == "tpu"
    assert len(list(m.parameters())) == 1
    idx = torch.tensor([1, 2, 3])
    m(idx.to("tpu")).backward()
    ref(idx).backward()
    torch.testing.assert_close(m.emb.weight.grad.cpu(), ref.emb.weight.grad)
    m.to("cpu")
    assert m.head.weight is m.emb.weight and m.head.weight.device.type == "cpu"


def test_module_to_keeps_parameter_and_buffer_identity():
    """As on CUDA, module.to("tpu") swaps .data in place: the Parameter objects stay."""
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    params = list(m.parameters())
    ids = [id(p) for p in params]
    opt = torch.optim.SGD(m.parameters(), lr=0.1)  # built before the move, as users do
    m.to("tpu")
    assert [id(p) for p in m.parameters()] == ids
    assert all(p.device.type == "tpu" and isinstance(p, torch.nn.Parameter) for p in m.parameters())
    assert all(b.device.type == "tpu" for b in m.buffers())
    out = m(torch.randn(5, 4, device="tpu")).sum()
    out.backward()
    assert all(p.grad is not None and p.grad.device.type == "tpu" for p in params)
    before = params[0].detach().cpu().clone()
    opt.step()  # the optimizer still holds the moved parameters
    assert not torch.equal(params[0].detach().cpu(), before)
    m.cpu()
    assert [id(p) for p in m.parameters()] == ids
    assert all(p.device.type == "cpu" for p in m.parameters())
    assert all(p.grad.device.type == "cpu" for p in m.parameters())


def test_parameter_data_swap_between_cpu_and_tpu():
    p = torch.nn.Parameter(torch.randn(3))
    assert torch._has_compatible_shallow_copy_type(p, torch.empty(3, device="tpu"))
    assert torch._has_compatible_shallow_copy_type(torch.empty(3, device="tpu"), p)
    ref = p.detach().clone()
    p.data = p.data.to("tpu")
    assert p.device.type == "tpu" and p.requires_grad
    torch.testing.assert_close(p.detach().cpu(), ref)
    assert not torch._has_compatible_shallow_copy_type(
        torch.empty(3, device="tpu"), torch.empty(3).to_sparse())


def test_dtype_and_device_move_together_keep_ties():
    m = Tied()
    m.to(device="tpu", dtype=torch.float64)
    assert m.head.weight is m.emb.weight and m.emb.weight.dtype == torch.float64
    m.to(torch.float32).cpu()
    assert m.head.weight is m.emb.weight and m.emb.weight.device.type == "cpu"

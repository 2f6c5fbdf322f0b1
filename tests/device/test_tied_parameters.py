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

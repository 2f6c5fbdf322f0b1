"""torch.save / torch.load(weights_only=True) of tpu tensors (PyTorch's default since
2.6): values, dtypes, devices, views sharing a storage, and map_location."""
import io

import torch


def test_weights_only_round_trip():
    base = torch.arange(12.0).reshape(3, 4)
    sd = {"w": base.to("tpu"), "b": torch.tensor([1, 2, 3], dtype=torch.int64).to("tpu"),
          "h": torch.randn(5).to(torch.bfloat16).to("tpu")}
    sd["view"] = sd["w"][1]
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=True)
    for k, v in sd.items():
        assert back[k].device.type == "tpu" and back[k].dtype == v.dtype, k
        assert torch.equal(back[k].cpu(), v.cpu()), k
    # the view still shares its storage with w after loading
    back["w"][1].fill_(7.0)
    assert torch.equal(back["view"].cpu(), torch.full((4,), 7.0))
    buf.seek(0)
    on_cpu = torch.load(buf, weights_only=True, map_location="cpu")
    assert on_cpu["w"].device.type == "cpu" and torch.equal(on_cpu["w"], base)


def test_weights_only_module_state_dict():
    m = torch.nn.Linear(4, 3).to("tpu")
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    m2 = torch.nn.Linear(4, 3).to("tpu")
    m2.load_state_dict(torch.load(buf))  # weights_only is the default
    x = torch.randn(2, 4)
    assert torch.equal(m2(x.to("tpu")).cpu(), m(x.to("tpu")).cpu())

"""A graph break in the middle of a model: both halves compile, the code between
them runs in the current eager mode, and results match eager."""
import copy

import pytest
import torch

import torch_tpu
from models import BreakInTheMiddle

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["strict_eager", "defer_and_fuse"])
def test_graph_break_in_the_middle(mode):
    torch_tpu.set_execution_mode(mode)
    torch.manual_seed(0)
    model = BreakInTheMiddle()
    ref = copy.deepcopy(model)
    tpu_model = model.to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    for sign in (1.0, -1.0):  # both sides of the data-dependent branch
        x = sign * torch.rand(4, 6)
        ref_out = ref(x)
        ref_out.sum().backward()
        out = compiled(x.to("tpu"))
        out.sum().backward()
        torch.testing.assert_close(out.cpu(), ref_out.detach(), **TOL)
    for p, q in zip(tpu_model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, **TOL)
    kinds = [g["kind"] for g in torch_tpu.debug.compiled_graphs()]
    assert kinds.count("forward") >= 2 and kinds.count("backward") >= 2, kinds

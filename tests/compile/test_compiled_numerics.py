"""torch.compile(backend="tpu") against eager: outputs, gradients and buffer
updates of an MLP, a small GPT, a small CNN with BatchNorm and a model whose
forward mutates its buffers."""
import copy

import torch

import torch_tpu
from models import RunningMean, SmallCNN, mlp, small_gpt

TOL = dict(rtol=1e-4, atol=1e-5)


def _compare_grads(tpu_model, ref_model):
    for (name, p), q in zip(tpu_model.named_parameters(), ref_model.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad.cpu(), q.grad.cpu(), **TOL, msg=name)


def _against_cpu(model, *inputs):
    """Compiled tpu forward + backward vs CPU eager on the same weights."""
    ref = copy.deepcopy(model)
    ref_out = ref(*inputs)
    ref_out.square().mean().backward()
    tpu_model = model.to("tpu")
    out = torch.compile(tpu_model, backend="tpu")(*[i.to("tpu") for i in inputs])
    assert out.device.type == "tpu"
    out.square().mean().backward()
    torch.testing.assert_close(out.cpu(), ref_out.detach(), **TOL)
    _compare_grads(tpu_model, ref)
    return tpu_model, ref


def test_mlp_forward_and_gradients():
    torch.manual_seed(0)
    _against_cpu(mlp(), torch.randn(5, 8))
    graphs = torch_tpu.debug.compiled_graphs()
    assert [g["kind"] for g in graphs] == ["forward", "backward"]
    assert all(g["calls"] == 1 and g["nodes"] > 0 for g in graphs)


def test_small_gpt_forward_and_gradients():
    torch.manual_seed(0)
    # Compared with the eager tpu model: moving a module with tied weights to a
    # PrivateUse1 device unties them, so a CPU copy would be a different model.
    model = small_gpt().to("tpu")
    ref = copy.deepcopy(model)
    x = torch.randint(0, 17, (2, 8)).to("tpu")
    y = torch.randint(0, 17, (2, 8)).to("tpu")
    ref_logits, ref_loss = ref(x, y)
    ref_loss.backward()
    fallbacks = torch_tpu.debug.metrics()["cpu_fallback_ops"]
    logits, loss = torch.compile(model, backend="tpu")(x, y)
    loss.backward()
    torch.testing.assert_close(logits.cpu(), ref_logits.detach().cpu(), **TOL)
    torch.testing.assert_close(loss.cpu(), ref_loss.detach().cpu(), **TOL)
    _compare_grads(model, ref)
    # Every op of both graphs has a lowering: nothing ran on the CPU.
    assert torch_tpu.debug.metrics()["cpu_fallback_ops"] == fallbacks


def test_cnn_with_batchnorm_train_and_eval():
    torch.manual_seed(0)
    x = torch.randn(3, 3, 8, 8)
    model, ref = _against_cpu(SmallCNN(), x)
    # Running statistics were updated inside the compiled forward, in place.
    torch.testing.assert_close(model.bn.running_mean.cpu(), ref.bn.running_mean, **TOL)
    torch.testing.assert_close(model.bn.running_var.cpu(), ref.bn.running_var, **TOL)
    assert int(model.bn.num_batches_tracked.cpu()) == 1
    model.eval()
    ref.eval()
    with torch.no_grad():
        out = torch.compile(model, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), ref(x), **TOL)


def test_forward_that_mutates_buffers():
    torch.manual_seed(0)
    model = RunningMean()
    ref = copy.deepcopy(model)
    tpu_model = model.to("tpu")
    compiled = torch.compile(tpu_model, backend="tpu")
    steps_buffer = tpu_model.steps  # the same tensor object must see the updates
    for i in range(3):
        x = torch.randn(5, 4)
        ref_out = ref(x)
        out = compiled(x.to("tpu"))
        torch.testing.assert_close(out.cpu(), ref_out.detach(), **TOL)
    assert tpu_model.steps is steps_buffer
    assert float(steps_buffer.cpu()) == 3.0
    torch.testing.assert_close(tpu_model.ema.cpu(), ref.ema, **TOL)


def test_input_views_and_outputs_that_alias():
    # A view as input (a slice with an offset, a transpose) and outputs that are
    # views of an input: bound to the program through their storages.
    base = torch.randn(6, 8)
    tb = base.to("tpu")

    def f(a, b):
        return (a * 2 + b.t()).relu(), a.transpose(0, 1), a[1:]

    outs = torch.compile(f, backend="tpu")(tb[1:5, 2:6], tb[:4, 4:8])
    refs = f(base[1:5, 2:6], base[:4, 4:8])
    for o, r in zip(outs, refs):
        torch.testing.assert_close(o.cpu(), r, **TOL)

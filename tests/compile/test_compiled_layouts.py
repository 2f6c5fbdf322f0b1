"""torch.compile graphs whose recorded views depend on the layouts of intermediate
results. AOTAutograd decides view-or-copy (matmul's flattening, `.view`) from the fake
tensors' strides, the meta kernels'; the tpu results must have those strides too, or
the recorded graph fails where the CPU's runs (Falcon-Mamba, Falcon-H1, FastSpeech2's
conformer: an elementwise op on a transposed activation, transposed back, then a
Linear)."""
import torch
import torch.nn.functional as F

TOL = dict(rtol=1e-4, atol=1e-5)


def _against_cpu(fn, *cpu_inputs, grad=False):
    ins = [x.clone().requires_grad_(grad) for x in cpu_inputs]
    tins = [x.detach().to("tpu").requires_grad_(grad) for x in cpu_inputs]
    want = fn(*ins)
    torch._dynamo.reset()
    got = torch.compile(fn, backend="tpu")(*tins)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), **TOL)
    if grad:
        want.square().sum().backward()
        got.square().sum().backward()
        for a, b in zip(tins, ins):
            torch.testing.assert_close(a.grad.cpu(), b.grad, **TOL)


def _transposed_gate_then_linear(x, w):
    h = x.transpose(1, 2)                # (B, L, C) seen as (B, C, L)
    h = F.silu(h) * h                    # results in the transposed layout, as on the CPU
    return F.linear(h.transpose(1, 2), w)  # contiguous again: matmul records a view


def test_linear_of_elementwise_result_on_transposed_input():
    _against_cpu(_transposed_gate_then_linear, torch.randn(2, 8, 6), torch.randn(5, 6))


def test_linear_of_elementwise_result_on_transposed_input_backward():
    _against_cpu(_transposed_gate_then_linear, torch.randn(2, 8, 6), torch.randn(5, 6), grad=True)


def test_view_of_elementwise_result_on_permuted_input():
    def fn(x):
        y = torch.exp(x.permute(0, 2, 1)) + 1
        return y.permute(0, 2, 1).view(-1, x.shape[-1])
    _against_cpu(fn, torch.randn(3, 4, 5))


def _heads_split(a, b):
    # bmm's (B*H, L, D) result seen as (B, L, H, D) and scaled: the output keeps the
    # transposed layout, and the backward graph undoes it with a `view` that only that
    # layout allows (Longformer's attention output)
    return torch.bmm(a, b).view(2, 4, 5, 3).transpose(1, 2) * 2


def test_gradient_in_another_layout_than_the_traced_tangent():
    a, b, w = torch.randn(8, 5, 6), torch.randn(8, 6, 3), torch.randn(2, 5, 4, 3)

    def loss(fn, a, b, w):
        # .contiguous() hands the output's gradient back contiguous, not in its layout
        return (fn(a, b).contiguous() * w).sum()

    ins = [x.clone().requires_grad_(True) for x in (a, b)]
    tins = [x.to("tpu").requires_grad_(True) for x in (a, b)]
    loss(_heads_split, *ins, w).backward()
    torch._dynamo.reset()
    compiled = torch.compile(_heads_split, backend="tpu")
    for _ in range(2):  # the recorded first call and the directly called program after it
        for t in tins:
            t.grad = None
        loss(compiled, *tins, w.to("tpu")).backward()
        for t, x in zip(tins, ins):
            torch.testing.assert_close(t.grad.cpu(), x.grad, **TOL)

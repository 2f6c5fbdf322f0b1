"""zero_ of memory nothing has written yet (zeros_like, torch.zeros in Defer & Fuse)
is its zero upload alone: the values are those of the CPU, and a training loop's
first step compiles the program every later step runs (AdamW makes its state with
zeros_like inside the first step; recorded, those zeros made the first step's
fused program a second one to compile)."""
import torch
import torch_tpu

from conftest import assert_close_cpu


def built():
    # Compiled by XLA or loaded from the persistent cache (another test may have
    # compiled the same program).
    m = torch_tpu.debug.metrics()
    return m["programs_compiled"] + m["disk_hits"]


def test_zero_of_fresh_and_written_memory():
    x = torch.randn(5, 7)
    t = x.to("tpu")
    assert_close_cpu(torch.zeros_like(t), torch.zeros_like(x))
    assert_close_cpu(torch.zeros(3, 4, device="tpu", dtype=torch.bfloat16),
                     torch.zeros(3, 4, dtype=torch.bfloat16))
    assert_close_cpu(torch.empty(6, device="tpu", dtype=torch.int32).zero_(),
                     torch.zeros(6, dtype=torch.int32))
    # A view of fresh memory; the rest of the storage stays usable.
    base = torch.empty(4, 5, device="tpu")
    base[1:3].zero_()
    base[0] = 1.0
    base[3] = 2.0
    ref = torch.zeros(4, 5)
    ref[0], ref[3] = 1.0, 2.0
    assert_close_cpu(base, ref)
    # Written memory (materialised, and pending in Defer & Fuse) is still zeroed.
    t.zero_()
    assert_close_cpu(t, torch.zeros_like(x))
    y = x.to("tpu") * 2
    y[2:].zero_()
    ref = x * 2
    ref[2:] = 0
    assert_close_cpu(y, ref)
    z = torch.zeros_like(y).add_(3.0)
    assert_close_cpu(z, torch.full_like(x, 3.0))


def train(device, steps, after_first=None):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(),
                              torch.nn.Linear(16, 1)).to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 6, generator=g).to(device), torch.randn(8, 1, generator=g).to(device)
    losses = []
    for i in range(steps):
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if i == 0 and after_first:
            after_first()
    return losses, [p.detach() for p in net.parameters()]


def test_adamw_first_step_compiles_the_steady_program(tpu_execution_mode):
    torch_tpu.debug.clear_program_cache()
    counts = []
    losses, params = train("tpu", 4, after_first=lambda: counts.append(built()))
    # Steps 2-4 run what step 1 compiled: one fused program in Defer & Fuse; in
    # Strict Eager the per-op programs of step 1 (AdamW's state reads and writes
    # the same ops and shapes from the first step on).
    assert built() == counts[0]
    ref_losses, ref_params = train("cpu", 4)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), atol=1e-5, rtol=1e-5)
    for p, r in zip(params, ref_params):
        assert_close_cpu(p, r, atol=1e-5, rtol=1e-5)

"""Getting started with torch_tpu: the device, the execution modes, a training
loop, and what the backend did (torch_tpu.debug.report()).

    marimo edit docs/notebooks/getting_started.py    # interactive
    python docs/notebooks/getting_started.py         # runs every cell as a script
"""
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import marimo as mo
    return (mo,)


@app.cell
def _(mo):
    mo.md(r"""
    # Getting started with torch_tpu

    torch_tpu is a PyTorch backend: the device is called `"tpu"`, and PyTorch
    code runs on it unchanged once tensors and modules are moved there. Without a
    TPU it runs through XLA's CPU plugin, so everything below works on any machine
    (choose another with `TORCH_TPU_PLATFORM=tpu|cuda|cpu`).
    """)
    return


@app.cell
def _():
    import torch

    import torch_tpu  # registers the "tpu" device (importing torch alone also does)
    return torch, torch_tpu


@app.cell
def _(mo, torch):
    x = torch.randn(3, 4, device="tpu")
    y = (x @ x.T).relu()
    mo.md(f"""
    ## The device

    `torch.tpu` mirrors `torch.cuda`: this process sees
    **{torch.tpu.device_count()}** device(s), the first is
    **{torch.tpu.get_device_name()}**.

    A tensor made with `device="tpu"` lives there; ops on it run there, and
    `.cpu()` (or `.item()`, or printing) brings values back:

    ```
    x = torch.randn(3, 4, device="tpu")
    y = (x @ x.T).relu()      # {y.device}, shape {tuple(y.shape)}
    ```
    """)
    return


@app.cell
def _(mo):
    mo.md(r"""
    ## Three execution modes, one set of lowerings

    * **Strict Eager** (the default): every op runs as soon as it is called, as
      its own small compiled program (compiled once per op signature, then cached).
    * **Defer & Fuse**: ops are recorded and run as one fused program when a value
      is needed (`.item()`, `.cpu()`, an optimizer step, `torch.tpu.synchronize()`).
      `torch_tpu.set_execution_mode("defer_and_fuse")`, or for one block
      `with torch_tpu.execution_mode("defer_and_fuse"):`.
    * **Compiled**: `torch.compile(model, backend="tpu")` turns whole forward and
      backward graphs into one program each.

    The same computation in each mode gives the same numbers:
    """)
    return


@app.cell
def _(mo, torch, torch_tpu):
    def gelu_mlp(v):
        return torch.nn.functional.gelu(v @ v.T + 1).sum(dim=1)

    v = torch.linspace(-1, 1, 32, device="tpu").reshape(4, 8)
    before = torch_tpu.debug.metrics()["fused_graphs_run"]
    eager = gelu_mlp(v).cpu()
    with torch_tpu.execution_mode("defer_and_fuse"):
        fused = gelu_mlp(v).cpu()  # .cpu() runs the recorded ops as one program
    fused_graphs = torch_tpu.debug.metrics()["fused_graphs_run"] - before
    compiled = torch.compile(gelu_mlp, backend="tpu")(v).cpu()
    reference = gelu_mlp(v.cpu())
    modes_agree = all(torch.allclose(r, reference, atol=1e-5) for r in (eager, fused, compiled))
    mo.md(f"""
    | mode | result (first two) |
    |---|---|
    | Strict Eager | {eager[:2].tolist()} |
    | Defer & Fuse ({fused_graphs} fused program) | {fused[:2].tolist()} |
    | torch.compile(backend="tpu") | {compiled[:2].tolist()} |
    | PyTorch on the CPU | {reference[:2].tolist()} |

    All agree with the CPU: **{modes_agree}**.
    """)
    return (modes_agree,)


@app.cell
def _(mo):
    mo.md(r"""
    ## A training loop

    Nothing tpu-specific beyond `.to("tpu")`: the three lines of every PyTorch
    training step, here in Defer & Fuse (each step becomes one fused program; the
    optimizer step ends it).
    """)
    return


@app.cell
def _(mo, torch, torch_tpu):
    torch.manual_seed(0)
    points = torch.randn(512, 2)
    labels = (points[:, 0] * points[:, 1] > 0).long()  # XOR-like quadrants
    model = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 2)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=0.02)
    data, target = points.to("tpu"), labels.to("tpu")
    losses = []
    with torch_tpu.execution_mode("defer_and_fuse"):
        for step in range(60):
            loss = torch.nn.functional.cross_entropy(model(data), target)
            opt.zero_grad()
            loss.backward()   # 1
            opt.step()        # 2
            losses.append(loss.item())  # 3: reading the loss waits for the step
    accuracy = (model(data).argmax(1) == target).float().mean().item()
    mo.md(f"""
    ```
    for step in range(60):
        loss = F.cross_entropy(model(data), target)
        opt.zero_grad(); loss.backward(); opt.step()
    ```
    loss {losses[0]:.3f} -> {losses[-1]:.3f}, training accuracy {100 * accuracy:.1f}%.
    """)
    return accuracy, losses


@app.cell
def _(mo, torch_tpu):
    report = torch_tpu.debug.report()
    fallbacks = torch_tpu.debug.metrics()["cpu_fallback_ops"]
    mo.vstack([mo.md(r"""
    ## What the backend did: `torch_tpu.debug.report()`

    Ops by mode, programs compiled and the time it took, cache hits, fused
    graphs, what made values materialise, host <-> device traffic, and any op
    that had no lowering and ran on the CPU (with the line that first called it):
    """), mo.plain_text(report)])
    return fallbacks, report


if __name__ == "__main__":
    app.run()

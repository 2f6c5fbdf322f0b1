"""Defer & Fuse vs Strict Eager vs compiled: the same minGPT training run in each
mode on the tpu device (and PyTorch's CPU eager for scale), with a plot of the
time every step took.

    marimo edit docs/notebooks/execution_modes.py    # interactive: change the sizes
    python docs/notebooks/execution_modes.py         # runs every cell as a script
"""
import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell
def _():
    import sys
    import time

    import marimo as mo
    import torch

    import torch_tpu
    root = str(mo.notebook_dir().parent.parent)  # the repository, for examples/
    if root not in sys.path:
        sys.path.insert(0, root)
    from examples import harness
    from examples.mingpt.model import GPT, GPTConfig
    return GPT, GPTConfig, harness, mo, time, torch, torch_tpu


@app.cell
def _(mo):
    mo.md(r"""
    # Defer & Fuse vs Strict Eager vs compiled

    One model, three ways to run it on the `tpu` device:

    * **Strict Eager** runs each op as its own small cached program: the first
      step compiles every distinct op once, later steps pay a launch per op.
    * **Defer & Fuse** records a whole training step and runs it as one fused
      program: the first step compiles that program, later steps reuse it.
    * **Compiled** (`torch.compile(model, backend="tpu")`) turns the forward and
      backward graphs into one program each, traced once by Dynamo.

    Change the sizes and the number of steps here; the plot follows.
    """)
    return


@app.cell
def _(mo):
    steps = mo.ui.slider(4, 60, value=8, label="steps per mode")
    width = mo.ui.dropdown(["32", "64", "128"], value="32", label="model width")
    context = mo.ui.dropdown(["16", "32", "64"], value="16", label="context")
    mo.hstack([steps, width, context])
    return context, steps, width


@app.cell
def _(GPT, GPTConfig, context, harness, steps, torch, width):
    def run(device, mode):
        """Seconds per training step of a small minGPT in one mode."""
        n_embd, block = int(width.value), int(context.value)
        g = torch.Generator().manual_seed(0)

        def build(dev):
            torch.manual_seed(0)
            model = GPT(GPTConfig(vocab_size=65, block_size=block, n_layer=1, n_head=2,
                                  n_embd=n_embd)).to(dev)
            return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

        def batch():
            x = torch.randint(0, 65, (4, block), generator=g)
            return x, torch.roll(x, -1, dims=1)

        _, _, losses, times = harness.train_loop(build, batch, device, mode, steps.value,
                                                 desc=mode, quiet=True)
        return losses, times

    runs = {
        "strict_eager": run("tpu", "strict_eager"),
        "defer_and_fuse": run("tpu", "defer_and_fuse"),
        "compile": run("tpu", "compile"),
        "cpu eager (PyTorch)": run("cpu", "strict_eager"),
    }
    torch._dynamo.reset()
    return (runs,)


@app.cell
def _(mo, runs):
    import statistics

    rows = ["| mode | first step (s) | median later step (ms) | final loss |", "|---|---:|---:|---:|"]
    for _name, (_losses, _times) in runs.items():
        _later = _times[1:] or _times
        rows.append(f"| {_name} | {_times[0]:.2f} | {1e3 * statistics.median(_later):.1f} | "
                    f"{_losses[-1]:.4f} |")
    mo.md("The first step includes compiling; later steps reuse the programs.\n\n"
          + "\n".join(rows))
    return


@app.cell
def _(runs):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for _label, (_, _times) in runs.items():
        ax.plot(range(1, len(_times) + 1), [1e3 * t for t in _times], marker="o", label=_label)
    ax.set_yscale("log")
    ax.set_xlabel("training step")
    ax.set_ylabel("step time (ms, log scale)")
    ax.set_title("minGPT training step time per execution mode")
    ax.legend()
    fig.tight_layout()
    fig
    return (fig,)


@app.cell
def _(mo, runs, torch_tpu):
    losses_agree = max(abs(a - b) for a, b in zip(runs["defer_and_fuse"][0],
                                                  runs["cpu eager (PyTorch)"][0])) < 1e-3
    mo.md(f"""
    All modes train the same model on the same batches: Defer & Fuse's losses
    match PyTorch's CPU eager: **{losses_agree}**. Ops that fell back to the CPU:
    **{torch_tpu.debug.metrics()["cpu_fallback_ops"]}**.
    """)
    return (losses_agree,)


if __name__ == "__main__":
    app.run()

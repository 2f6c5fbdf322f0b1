"""What the example trainers share: the device/mode/amp flags, putting a model into
the chosen execution mode, the training loop with its tqdm progress bar, waiting for
the device, throughput, and the `--check` comparison with CPU.

Modes on the `tpu` device:
  strict_eager    every op runs when called (its own small cached program)
  defer_and_fuse  ops are recorded and run as one fused program when a value is read
  compile         torch.compile(model, backend="tpu"): whole forward/backward graphs
  inductor        torch.compile(model), the default backend, as a user writes it (on
                  tpu inductor hands each graph whole to the same compiler)
On `cpu` the first two are PyTorch's ordinary eager mode and `compile` is
torch.compile's default backend (inductor), the baseline a CPU user would pick.

Mixed precision (`--amp`, every example): `bf16` runs the forward pass under
torch.autocast(device, torch.bfloat16), the TPU's native type; `fp16` under
float16 autocast with a torch.amp.GradScaler, as on CUDA; `off` (default; `none`
is accepted as an alias) is float32. An example passes `args.amp` to train_loop
(and wraps evaluation and sampling in autocast(device, args.amp)); `--check` then
compares with the CPU running the same autocast, within check_rtol(args.amp).

A model for train_loop is called as model(*inputs, target) and returns
(output, loss); each example's data gives CPU batches (inputs..., target).
"""
import contextlib
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODES = ("strict_eager", "defer_and_fuse", "compile", "inductor")
AMP = ("off", "bf16", "fp16")
WARMUP = 2  # steps left out of throughput: the first compiles, the second adds optimizer state


def add_common_args(parser, steps, batch, width=None, depth=None):
    """The flags every example takes; the defaults are per example (width/depth only
    where the example has a single width and depth)."""
    parser.add_argument("--device", default="tpu", help="tpu (default) or cpu")
    parser.add_argument("--mode", choices=MODES, default="defer_and_fuse",
                        help="execution mode on tpu (default: defer_and_fuse)")
    parser.add_argument("--amp", type=amp_value, choices=AMP, default="off",
                        help="mixed precision: bf16 autocast, fp16 autocast + GradScaler, "
                             "or off (float32, the default; 'none' means off)")
    parser.add_argument("--steps", type=int, default=steps, help="training steps")
    parser.add_argument("--batch", type=int, default=batch, help="batch size")
    if width is not None:
        parser.add_argument("--width", type=int, default=width, help="model width")
    if depth is not None:
        parser.add_argument("--depth", type=int, default=depth, help="model depth")
    parser.add_argument("--lr", type=float, default=None, help="learning rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true",
                        help="run a few steps on the device and on CPU; assert the losses agree")
    parser.add_argument("--check-steps", type=int, default=3)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def amp_value(text):
    """An --amp argument: `none` is another name for `off`."""
    return "off" if text == "none" else text


def device_type(device):
    return str(device).split(":")[0]


def announce(device):
    """Prints which machine the tpu device is (the CPU plugin, a TPU, a GPU)."""
    if device_type(device) == "tpu":
        import torch
        print(f"tpu device: {torch.tpu.get_device_name()}")


def enter_mode(device, mode):
    """Sets the process's execution mode for `device` (Strict Eager is also what
    the compile mode's eager remainder, the optimizer step, runs in)."""
    if device_type(device) != "tpu":
        return
    import torch_tpu
    torch_tpu.set_execution_mode("defer_and_fuse" if mode == "defer_and_fuse"
                                 else "strict_eager")


def compile_model(model, device, mode):
    """The model to call: itself, or torch.compile of it in compile mode."""
    if mode == "inductor":
        import torch
        return torch.compile(model)
    if mode != "compile":
        return model
    import torch
    backend = "tpu" if device_type(device) == "tpu" else "inductor"
    try:
        return torch.compile(model, backend=backend)
    except Exception as e:  # an unregistered backend is rejected here, by name
        sys.exit(f"--mode compile needs torch.compile(backend={backend!r}), which is not "
                 f"available here: {type(e).__name__}: {e}")


def amp_dtype(amp):
    """The autocast dtype of an --amp value (None for off)."""
    import torch
    return {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[amp_value(amp)]


def autocast(device, amp):
    """The context the forward pass runs in: torch.autocast for bf16/fp16, else nothing."""
    import torch
    dtype = amp_dtype(amp)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type(device), dtype=dtype)


def check_rtol(amp):
    """How closely --check's losses must agree with the CPU's: float32 runs agree to a
    few ulps; under autocast, two devices may round a bfloat16/float16 value apart."""
    return {"off": 1e-4, "bf16": 3e-2, "fp16": 1e-2}[amp_value(amp)]


def progress(iterable, desc, quiet=False, **kw):
    """tqdm's progress bar (on stderr), or none with --quiet."""
    from tqdm import tqdm
    return tqdm(iterable, desc=desc, disable=quiet, dynamic_ncols=True, **kw)


def synchronize(device):
    """Waits for queued device work, so that timings measure the work, not its launch."""
    if device_type(device) == "tpu":
        import torch
        torch.tpu.synchronize()


def end_step(device):
    """Marks the end of one iteration of a loop that reads nothing back (sampling):
    Defer & Fuse runs the pending graph here, so every iteration records the same
    graph and it compiles once (a loop left to grow would be cut at arbitrary
    points, each a new program). Nothing happens elsewhere."""
    if device_type(device) == "tpu":
        import torch_tpu
        torch_tpu.mark_step()


def throughput(times, items_per_step):
    """(items per second over the steps after warm-up, how many steps that is)."""
    timed = times[WARMUP:] or times
    return items_per_step * len(timed) / sum(timed), len(timed)


def compare_losses(dev_losses, cpu_losses, rtol, device):
    """Prints both loss lists and fails unless they agree within `rtol`."""
    print(f"check: {device} losses {[round(x, 5) for x in dev_losses]}")
    print(f"check: cpu losses {[round(x, 5) for x in cpu_losses]}")
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(dev_losses, cpu_losses))
    print(f"check: largest relative difference {worst:.2e} (tolerance {rtol:.0e})")
    assert len(dev_losses) == len(cpu_losses) and worst <= rtol, \
        f"{device} and cpu losses disagree: relative difference {worst:.2e} > {rtol:.0e}"
    print("check: OK")


def check(train, args, rtol=None):
    """`--check`: `train(device, mode, steps, quiet)` (returning train_loop's tuple)
    for a few steps on the chosen device and mode and on PyTorch's CPU eager (with the
    same --amp); the losses must agree within check_rtol(args.amp), or `rtol` where
    an example's float32 run needs its own tolerance (autocast runs keep check_rtol:
    bfloat16/float16 round differently per backend)."""
    _, _, dev_losses, _ = train(args.device, args.mode, args.check_steps, True)
    _, _, cpu_losses, _ = train("cpu", "strict_eager", args.check_steps, True)
    tol = rtol if rtol is not None and amp_value(args.amp) == "off" else check_rtol(args.amp)
    compare_losses(dev_losses, cpu_losses, tol, device=args.device)


def train_loop(build, next_batch, device, mode, steps, desc, quiet=False, amp="off"):
    """The training loop the examples share. `build(device)` returns (model,
    optimizer), the model returning (output, loss); `next_batch()` returns a CPU
    tuple (inputs..., target); `amp` is an --amp value. Returns (model, the callable
    model, losses, seconds per step)."""
    import torch
    enter_mode(device, mode)
    model, opt = build(device)
    fwd = compile_model(model, device, mode)
    # float16 needs loss scaling against underflowing gradients; bfloat16 has float32's range.
    scaler = torch.amp.GradScaler(device_type(device)) if amp_value(amp) == "fp16" else None
    losses, times = [], []
    bar = progress(range(steps), desc, quiet)
    for _ in bar:
        start = time.perf_counter()
        batch = [t.to(device) for t in next_batch()]
        with autocast(device, amp):
            _, loss = fwd(*batch)
        opt.zero_grad(set_to_none=True)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        losses.append(loss.item())  # reading the loss waits for the step to finish
        times.append(time.perf_counter() - start)
        bar.set_postfix_str(f"loss {losses[-1]:.4f}", refresh=False)
    return model, fwd, losses, times

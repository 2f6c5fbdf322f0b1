"""What the example trainers share: the device/mode flags, putting a model into the
chosen execution mode, waiting for the device, and the `--check` comparison with CPU.

Modes on the `tpu` device:
  strict_eager    every op runs when called (its own small cached program)
  defer_and_fuse  ops are recorded and run as one fused program when a value is read
  compile         torch.compile(model, backend="tpu"): whole forward/backward graphs
On `cpu` the first two are PyTorch's ordinary eager mode and `compile` is
torch.compile's default backend (inductor), the baseline a CPU user would pick.

Mixed precision (`--amp`, every example): `bf16` runs the forward pass under
torch.autocast(device, torch.bfloat16), the TPU's native type; `fp16` under
float16 autocast with a torch.amp.GradScaler, as on CUDA; `off` (default) is
float32. An example passes `args.amp` to train_loop (and wraps evaluation in
autocast(device, args.amp)); `--check` then compares with the CPU running the same
autocast, within check_rtol(args.amp).
"""
import contextlib
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
MODES = ("strict_eager", "defer_and_fuse", "compile")
AMP = ("off", "bf16", "fp16")


def add_common_args(parser, steps, batch, width, depth):
    """The flags every example takes; the defaults are per example."""
    parser.add_argument("--device", default="tpu", help="tpu (default) or cpu")
    parser.add_argument("--mode", choices=MODES, default="defer_and_fuse",
                        help="execution mode on tpu (default: defer_and_fuse)")
    parser.add_argument("--steps", type=int, default=steps, help="training steps")
    parser.add_argument("--batch", type=int, default=batch, help="batch size")
    parser.add_argument("--width", type=int, default=width, help="model width")
    parser.add_argument("--depth", type=int, default=depth, help="model depth")
    parser.add_argument("--lr", type=float, default=None, help="learning rate")
    parser.add_argument("--amp", choices=AMP, default="off",
                        help="mixed precision: bf16 autocast, fp16 autocast + GradScaler, "
                             "or off (float32, the default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true",
                        help="run a few steps on the device and on CPU; assert the losses agree")
    parser.add_argument("--check-steps", type=int, default=3)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def device_type(device):
    return str(device).split(":")[0]


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
    if mode != "compile":
        return model
    import torch
    backend = "tpu" if device_type(device) == "tpu" else "inductor"
    try:
        return torch.compile(model, backend=backend)
    except Exception as e:  # an unregistered backend is rejected here, by name
        sys.exit(f"--mode compile needs torch.compile(backend={backend!r}), which is not "
                 f"available here: {type(e).__name__}: {e}")


def synchronize(device):
    """Waits for queued device work, so that timings measure the work, not its launch."""
    if device_type(device) == "tpu":
        import torch
        torch.tpu.synchronize()


def amp_dtype(amp):
    """The autocast dtype of an --amp value (None for off)."""
    import torch
    return {"off": None, "bf16": torch.bfloat16, "fp16": torch.float16}[amp]


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
    return {"off": 1e-4, "bf16": 3e-2, "fp16": 1e-2}[amp]


def compare_losses(dev_losses, cpu_losses, rtol, device):
    """Prints both loss lists and fails unless they agree within `rtol`."""
    print(f"check: {device} losses {[round(x, 5) for x in dev_losses]}")
    print(f"check: cpu losses {[round(x, 5) for x in cpu_losses]}")
    worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(dev_losses, cpu_losses))
    print(f"check: largest relative difference {worst:.2e} (tolerance {rtol:.0e})")
    assert len(dev_losses) == len(cpu_losses) and worst <= rtol, \
        f"{device} and cpu losses disagree: relative difference {worst:.2e} > {rtol:.0e}"
    print("check: OK")


def train_loop(build, next_batch, device, mode, steps, desc, quiet=False, amp="off"):
    """The training loop the examples share. `build(device)` returns (model,
    optimizer), the model returning (logits, loss); `next_batch()` returns a CPU
    (inputs, targets) batch; `amp` is an --amp value. Returns (model, the callable
    model, losses, seconds per step)."""
    import time

    import torch

    from examples.progress import progress
    enter_mode(device, mode)
    model, opt = build(device)
    fwd = compile_model(model, device, mode)
    # float16 needs loss scaling against underflowing gradients; bfloat16 has float32's range.
    scaler = torch.amp.GradScaler(device_type(device)) if amp == "fp16" else None
    losses, times = [], []
    bar = progress(range(steps), desc=desc, disable=quiet)
    for _ in bar:
        start = time.perf_counter()
        x, y = next_batch()
        with autocast(device, amp):
            _, loss = fwd(x.to(device), y.to(device))
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
        bar.set_postfix_str(f"loss {losses[-1]:.4f}")
    return model, fwd, losses, times

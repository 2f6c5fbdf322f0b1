"""Execution modes: Strict Eager (every op runs when called) and Defer & Fuse
(ops are recorded and run as one fused program when a value is needed).

    torch_tpu.set_execution_mode("defer_and_fuse")
    with torch_tpu.execution_mode("strict_eager"):   # this thread, this block
        ...

Environment: TORCH_TPU_EXECUTION_MODE=strict_eager|defer_and_fuse (alias
TORCH_TPU_DEFER_AND_FUSE=1). TORCH_TPU_LAUNCH_BLOCKING=1 wins over both.
Note: autograd runs backward passes on its own device thread, which follows
the process-wide mode, not a thread's override.
"""
import contextlib

import torch

from . import _C, settings

STRICT_EAGER = "strict_eager"
DEFER_AND_FUSE = "defer_and_fuse"
_NAMES = {STRICT_EAGER: 0, DEFER_AND_FUSE: 1}
_ALIASES = {"eager": STRICT_EAGER, "strict": STRICT_EAGER, "defer": DEFER_AND_FUSE,
            "fuse": DEFER_AND_FUSE, "lazy": DEFER_AND_FUSE}


def _code(mode):
    name = _ALIASES.get(str(mode).strip().lower(), str(mode).strip().lower())
    if name not in _NAMES:
        raise ValueError(f"unknown tpu execution mode {mode!r}: use 'strict_eager' or "
                         f"'defer_and_fuse'")
    return _NAMES[name]


def set_execution_mode(mode):
    """Sets the process-wide execution mode (pending deferred work runs first
    when leaving Defer & Fuse)."""
    _C._set_execution_mode(_code(mode))


def get_execution_mode():
    """The mode ops on this thread run in now."""
    return STRICT_EAGER if _C._current_mode() == 0 else DEFER_AND_FUSE


@contextlib.contextmanager
def execution_mode(mode):
    """Overrides the execution mode for this thread inside the block."""
    prev = _C._thread_mode()
    _C._set_thread_mode(_code(mode))
    try:
        yield
    finally:
        if _C._thread_mode() == 1 and _code(mode) == 1 and prev != 1:
            _C._flush("mode switch")
        _C._set_thread_mode(prev)


def mark_step(reason="mark_step"):
    """Runs the pending Defer & Fuse graph now (a no-op in Strict Eager)."""
    _C._flush(reason)


def _optimizer_step_boundary(optimizer, args, kwargs):
    # Cutting the graph at every optimizer step keeps graph boundaries fixed
    # from step to step, so the fused programs are reused (no recompiles).
    # A step traced by torch.compile is one program already: nothing to cut.
    if torch.compiler.is_compiling():
        return
    if _C._pending_nodes():
        _C._flush("optimizer step")


def _init_from_env():
    mode = settings.raw("TORCH_TPU_EXECUTION_MODE")
    if not mode and settings.get("TORCH_TPU_DEFER_AND_FUSE"):
        mode = DEFER_AND_FUSE
    if mode:
        set_execution_mode(mode)
    limit = settings.get("TORCH_TPU_MAX_GRAPH_NODES")
    if limit is not None:
        _C._set_max_graph_nodes(limit)
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(_optimizer_step_boundary)

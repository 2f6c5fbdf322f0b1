"""The pieces of the GPT benchmark that modes.py, peers.py, defer_breakdown.py and
compiled_host.py share: its size flags, its tpu model and batch, and its step function. Imports no torch at module level, so
peers.py's children can use it under another venv's torch."""

SIZE_FLAGS = (("layers", 4), ("heads", 4), ("width", 256), ("context", 128), ("batch", 8))


def add_size_args(p):
    for name, default in SIZE_FLAGS:
        p.add_argument(f"--{name}", type=int, default=default)


def size_argv(args):
    """The size flags again, for a child process's command line."""
    out = []
    for name, _ in SIZE_FLAGS:
        out += [f"--{name}", str(getattr(args, name))]
    return out


def tpu_gpt_and_batch(args):
    """The GPT of the size flags (vocabulary 65) built after torch.manual_seed(0) and
    moved to tpu, and one random batch (x, y) on tpu."""
    import torch
    from examples.mingpt.model import GPT, GPTConfig

    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=65, block_size=args.context, n_layer=args.layers,
                    n_head=args.heads, n_embd=args.width)
    model = GPT(cfg).to("tpu")
    x = torch.randint(0, 65, (args.batch, args.context)).to("tpu")
    y = torch.randint(0, 65, (args.batch, args.context)).to("tpu")
    return model, x, y


def make_step(model, opt, x, y, train):
    """One training step (forward, backward, AdamW) or one no-grad forward; returns the loss."""
    import torch

    def step():
        if train:
            _, loss = model(x, y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        else:
            with torch.no_grad():
                _, loss = model(x, y)
        return loss
    return step

"""Train DLRM on generated click logs, then score held-out logs (AUC).

The logs come from a hidden click model (examples/dlrm/data.py), so the model can
learn it: a constant predictor scores AUC 0.50; the held-out AUC says how much of
the signal the model found. Tables of mixed sizes, the largest a million rows.

    python examples/dlrm/train.py                        # Defer & Fuse on tpu
    python examples/dlrm/train.py --mode strict_eager --steps 100
    python examples/dlrm/train.py --mode compile         # torch.compile(backend="tpu")
    python examples/dlrm/train.py --device cpu           # PyTorch's CPU backend
    python examples/dlrm/train.py --check                # a few steps on tpu and CPU agree
    python examples/dlrm/train.py --tables 1000,100,10   # smaller tables
    python examples/dlrm/train.py --torchrec --check     # TorchRec's EBC + KJT (torchrec_model.py)
    torchrun --nproc_per_node 2 examples/dlrm/train.py --torchrec --sharding table_wise
                                                         # tables sharded by DMP (sharded.py)

Adagrad updates every parameter (the optimizer DLRM is usually trained with; it
takes dense and sparse gradients). `--sparse` makes the tables' gradients sparse
tensors, as `nn.EmbeddingBag(sparse=True)` does on CUDA; the tpu device refuses
them with an error that names the dense alternative (the default here).
"""
import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

import torch  # noqa: E402

from examples import harness  # noqa: E402
from examples.dlrm.data import DENSE, ClickLogs, auc, default_tables  # noqa: E402
from examples.dlrm.model import DLRM  # noqa: E402


def build(args, device):
    torch.manual_seed(args.seed)  # the same initial weights on every device
    if args.sharding:
        from examples.dlrm.sharded import shard
        from examples.dlrm.torchrec_model import TorchRecDLRM
        device = torch.device(device)
        if device.type == "tpu":
            device = torch.device("tpu", torch.tpu.current_device())
        return shard(TorchRecDLRM(args.tables, dense_in=DENSE, dim=args.dim), args.sharding,
                     device, args.lr or 0.05)
    if args.torchrec:
        from examples.dlrm.torchrec_model import TorchRecDLRM
        model = TorchRecDLRM(args.tables, dense_in=DENSE, dim=args.dim).to(device)
    else:
        model = DLRM(args.tables, dense_in=DENSE, dim=args.dim, sparse=args.sparse).to(device)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr or 0.05)
    return model, opt


def train(args, data, device, mode, steps, quiet=False):
    g = torch.Generator().manual_seed(args.seed)  # the same logs on every device
    next_batch = lambda: data.batch(args.batch, g)  # noqa: E731
    if args.sharding:  # every rank draws the global batch and takes its slice
        from examples.dlrm.sharded import local_batch
        next_batch = lambda: local_batch(data.batch(args.batch, g))  # noqa: E731
    return harness.train_loop(lambda dev: build(args, dev), next_batch,
                              device, mode, steps, f"train {device} {mode}", quiet, args.amp)


@torch.no_grad()
def evaluate(fwd, data, device, batch, amp="off"):
    """(mean log loss, AUC) on the held-out logs."""
    scores, labels, total = [], [], 0.0
    for dense, sparse, clicks in data.test_batches(batch):
        with harness.autocast(device, amp):
            logits, loss = fwd(dense.to(device), sparse.to(device), clicks.to(device))
        total += loss.item() * len(clicks)
        scores.append(logits.float().cpu())
        labels.append(clicks)
    labels = torch.cat(labels)
    return total / len(labels), auc(torch.cat(scores), labels), labels


def constant_log_loss(labels):
    """The log loss of the best constant predictor (the click rate)."""
    p = float(labels.mean())
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    harness.add_common_args(p, steps=300, batch=256)
    p.add_argument("--tables", default=",".join(map(str, default_tables())),
                   help="rows per embedding table, comma-separated")
    p.add_argument("--dim", type=int, default=16, help="embedding width")
    p.add_argument("--hot", type=int, default=4, help="most ids in one bag")
    p.add_argument("--test-logs", type=int, default=8192)
    p.add_argument("--sparse", action="store_true",
                   help="sparse embedding gradients (nn.EmbeddingBag(sparse=True))")
    p.add_argument("--torchrec", action="store_true",
                   help="TorchRec's EmbeddingBagCollection + KeyedJaggedTensor for the tables "
                        "(strict_eager / defer_and_fuse)")
    p.add_argument("--sharding", choices=["table_wise", "row_wise"],
                   help="with --torchrec, under torchrun: DistributedModelParallel shards the "
                        "tables (fused row-wise Adagrad), the MLPs replicated (sharded.py)")
    args = p.parse_args()
    if args.sharding and not args.torchrec:
        p.error("--sharding needs --torchrec")
    if args.sharding and "WORLD_SIZE" not in os.environ:
        p.error("--sharding runs under torchrun (torchrun --nproc_per_node N examples/dlrm/train.py ...)")
    if args.sharding and int(os.environ.get("RANK", "0")) != 0:
        args.quiet = True  # rank 0 reports; the others train and evaluate alongside
        sys.stdout = open(os.devnull, "w")
    if args.torchrec and (args.sparse or args.mode in ("compile", "inductor")):
        p.error("--torchrec runs in strict_eager or defer_and_fuse, with dense gradients")
    args.tables = tuple(int(n) for n in args.tables.split(","))
    if any(n < 2 for n in args.tables):
        p.error("--tables: every table needs at least 2 rows (row 0 is the padding id)")

    data = ClickLogs(args.tables, hot=args.hot, test=args.test_logs, seed=args.seed)
    harness.announce(args.device)
    params = sum(args.tables) * args.dim
    print(f"DLRM: {len(args.tables)} tables {args.tables} x {args.dim} ({params / 1e6:.1f}M "
          f"embedding parameters), bags of up to {args.hot} ids, batch {args.batch}; "
          f"device {args.device}, mode {args.mode}, amp {args.amp}"
          f"{', sparse gradients' if args.sparse else ''}{', TorchRec EBC + KJT' if args.torchrec else ''}")
    if args.check:
        if harness.device_type(args.device) == "tpu":
            import torch_tpu.debug
            torch_tpu.debug.reset_metrics()
        harness.check(lambda *a: train(args, data, *a), args)
        if harness.device_type(args.device) == "tpu":
            print(f"CPU-fallback ops {torch_tpu.debug.metrics()['cpu_fallback_ops']} "
                  f"{torch_tpu.debug.metrics()['cpu_fallback_counts'] or ''}")
        return

    try:
        model, fwd, losses, times = train(args, data, args.device, args.mode, args.steps,
                                          quiet=args.quiet)
    except NotImplementedError as e:  # --sparse on a device without sparse tensors
        if not args.sparse:
            raise
        sys.exit(f"dlrm --sparse on {args.device}: {e}")
    rate, timed = harness.throughput(times, args.batch)
    window = max(1, len(losses) // 10)
    print(f"loss {sum(losses[:window]) / window:.4f} -> {sum(losses[-window:]) / window:.4f} "
          f"(mean of the first and last {window} steps) over {args.steps} steps")
    print(f"first step {times[0]:.2f} s (includes compiling); {rate:,.0f} examples/s over "
          f"the {timed} steps after it")
    model.eval()
    start = time.perf_counter()
    loss, score, labels = evaluate(fwd, data, args.device, args.batch, args.amp)
    print(f"eval: AUC {score:.4f} (constant predictor 0.5000), log loss {loss:.4f} "
          f"(constant predictor {constant_log_loss(labels):.4f}) on {len(labels)} held-out "
          f"logs, {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()

"""Failures reach every rank as clear errors, never hangs (run under torchrun, 2 processes).

1. A collective one rank never joins: the other's wait ends at the group's
   timeout with the tpu process group's error naming the collective.
2. A rank that raises and exits: the others' collective fails (Gloo sees the
   connection close) instead of waiting for it.
Which of the two ended a wait is told by Gloo's message ("Timed out waiting 3000ms ..."
or "Connection closed by peer ..."), not by the clock, which a loaded machine stretches.
"""
import datetime
import os
import sys

import torch
import torch.distributed as dist

TPU = torch.device("tpu")


def main():
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    short = dist.new_group(timeout=datetime.timedelta(seconds=3))

    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4, device=TPU), group=short)
        except dist.DistBackendError as e:
            msg = str(e)
            assert "tpu process group: allreduce" in msg, msg
            assert "Timed out waiting 3000ms" in msg, msg  # the short group's own timeout
            print(f"rank 0: TIMEOUT_ERROR_OK: {msg.splitlines()[0][:200]}", flush=True)
        else:
            print("rank 0: all_reduce without its peer did not fail", flush=True)
            sys.exit(1)
    dist.barrier()

    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    try:
        dist.all_reduce(torch.ones(4, device=TPU))
        dist.all_reduce(torch.ones(4, device=TPU))
    except dist.DistBackendError as e:
        # The failure must come from the dead peer's closed connection, not from waiting
        # out the world group's timeout.
        first = str(e).splitlines()[0][:200]
        if "Timed out" in str(e):
            print(f"rank 0: the survivor timed out instead of seeing the peer exit: {first}",
                  flush=True)
            os._exit(4)
        print(f"rank 0: PEER_ERROR_OK: {first}", flush=True)
        os._exit(2)
    print("rank 0: all_reduce with a dead peer did not fail", flush=True)
    os._exit(3)


if __name__ == "__main__":
    main()

"""Failures reach every rank as clear errors, never hangs (run under torchrun, 2 processes).

1. A collective one rank never joins: the other's wait ends at the group's
   timeout with the tpu process group's error naming the collective.
2. A rank that raises and exits: the others' collective fails (Gloo sees the
   connection close) instead of waiting for it.
"""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

TPU = torch.device("tpu")


def main():
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    short = dist.new_group(timeout=datetime.timedelta(seconds=3))

    if rank == 0:
        t0 = time.time()
        try:
            dist.all_reduce(torch.ones(4, device=TPU), group=short)
        except dist.DistBackendError as e:
            msg = str(e)
            assert "tpu process group: allreduce" in msg, msg
            assert time.time() - t0 < 60, time.time() - t0
            print(f"rank 0: TIMEOUT_ERROR_OK after {time.time() - t0:.1f}s: "
                  f"{msg.splitlines()[0][:200]}", flush=True)
        else:
            print("rank 0: all_reduce without its peer did not fail", flush=True)
            sys.exit(1)
    dist.barrier()

    if rank == 1:
        raise RuntimeError("rank 1 fails on purpose")
    t1 = time.time()
    try:
        dist.all_reduce(torch.ones(4, device=TPU))
        dist.all_reduce(torch.ones(4, device=TPU))
    except dist.DistBackendError as e:
        # Well before the world group's 120 s timeout: the failure came from the dead
        # peer's closed connection, not from waiting it out. (Timed here, not around the
        # launch, so that a loaded machine's slow start-up cannot fail the test.)
        waited = time.time() - t1
        if waited >= 90:
            print(f"rank 0: the survivor waited {waited:.0f}s: a timeout, not the peer's error",
                  flush=True)
            os._exit(4)
        print(f"rank 0: PEER_ERROR_OK after {waited:.1f}s: {str(e).splitlines()[0][:200]}",
              flush=True)
        os._exit(2)
    print("rank 0: all_reduce with a dead peer did not fail", flush=True)
    os._exit(3)


if __name__ == "__main__":
    main()

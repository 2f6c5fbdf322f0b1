"""What the device-side checks cost: the minGPT and DLRM training steps with checks on
(the default) and off (TORCH_TPU_CHECKS=0), each configuration in its own child
process, in interleaved rounds (on, off, on, off, ...) so that a change in the load of
the machine hits both alike. Each child builds the workload, warms up (compiles), and
prints the median of its timed steps; the figure per configuration is the median
over rounds. Target: at most 3% step time.

    python benchmarks/check_cost.py [--models mingpt,dlrm] [--modes defer_and_fuse,strict_eager]
                                    [--size quick] [--rounds 3] [--steps 20] [--warmup 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, {here!r})
import torch, torch_tpu
from workloads import build, make_step
torch_tpu.set_execution_mode({mode!r})
net, x, y = build({model!r}, {size!r}, "tpu")
step = make_step(net, x, y, "train")
for _ in range({warmup}):
    step()
times = []
for _ in range({steps}):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
print("RESULT " + json.dumps(dict(median=statistics.median(times),
                                  checks=torch_tpu._C._device_checks_enabled())))
"""


def run_child(model, mode, size, checks, steps, warmup):
    env = dict(os.environ, TORCH_TPU_CHECKS="1" if checks else "0")
    code = CHILD.format(here=HERE, mode=mode, model=model, size=size, steps=steps, warmup=warmup)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=1800)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[len("RESULT "):])
            assert out["checks"] == checks, out
            return out["median"]
    raise RuntimeError(f"child failed ({model}, {mode}, checks={checks}):\n{r.stderr[-3000:]}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mingpt,dlrm")
    p.add_argument("--modes", default="defer_and_fuse,strict_eager")
    p.add_argument("--size", default="quick", choices=("smoke", "quick", "full"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    rows = []
    for model in a.models.split(","):
        for mode in a.modes.split(","):
            on, off = [], []
            for r in range(a.rounds):
                # Alternate which goes first, so neither always runs on a warmer machine.
                order = (True, False) if r % 2 == 0 else (False, True)
                for checks in order:
                    t = run_child(model, mode, a.size, checks, a.steps, a.warmup)
                    (on if checks else off).append(t)
            m_on, m_off = statistics.median(on), statistics.median(off)
            row = dict(model=model, mode=mode, size=a.size, on_ms=1e3 * m_on, off_ms=1e3 * m_off,
                       overhead_pct=100 * (m_on / m_off - 1), rounds_on_ms=[1e3 * t for t in on],
                       rounds_off_ms=[1e3 * t for t in off])
            rows.append(row)
            print(f"{model:7s} {mode:15s} checks on {row['on_ms']:8.2f} ms  off {row['off_ms']:8.2f} ms  "
                  f"overhead {row['overhead_pct']:+.1f}%", flush=True)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

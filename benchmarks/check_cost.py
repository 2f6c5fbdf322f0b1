"""What the device-side checks cost: the minGPT and DLRM training steps with checks on
(the default) and off (TORCH_TPU_CHECKS=0 or torch_tpu._C._set_device_checks(False)).

A figure that survives a loaded machine: each child process (one per model, mode and
round) builds the workload once, compiles the step both ways (the program caches keep
programs with and without checks apart, so switching recompiles nothing), then runs
pairs of steps in ABBA order (on, off, off, on, ...), so that a change in the machine's
load hits both alike within milliseconds instead of between processes. Per step it
records
  wall      perf_counter time of the step (it ends with torch.tpu.synchronize),
  host      this thread's CPU time (recording, dispatch, launching, reading flags),
  device    CPU time of the process's other threads: the XLA CPU plugin's device
            programs (not meaningful on a real accelerator),
and reports the medians with checks on and off, and the overhead as the median of the
per-pair ratios (on / off) of each measure. Also per step: programs launched and bytes
read back to the host, which must not grow with the checks. A child started with
TORCH_TPU_CHECKS=0 confirms that the switch off from the environment works.
Target: at most 3% step time.

    python benchmarks/check_cost.py [--models mingpt,dlrm] [--modes defer_and_fuse,strict_eager]
                                    [--size quick] [--rounds 3] [--pairs 30] [--warmup 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

CHILD = r"""
import json, sys, time
sys.path.insert(0, {here!r})
import torch, torch_tpu
from workloads import build, make_step
C = torch_tpu._C
assert C._device_checks_enabled(), "checks are on by default"
torch_tpu.set_execution_mode({mode!r})
net, x, y = build({model!r}, {size!r}, "tpu")
step = make_step(net, x, y, "train")
def timed():
    m0 = C._metrics()
    t0, h0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
    step()
    t1, h1, p1 = time.perf_counter(), time.thread_time(), time.process_time()
    m1 = C._metrics()
    return dict(wall=t1 - t0, host=h1 - h0, device=(p1 - p0) - (h1 - h0),
                launches=m1["executions"] - m0["executions"],
                to_host=m1["bytes_to_host"] - m0["bytes_to_host"])
for on in (True, False):
    C._set_device_checks(on)
    for _ in range({warmup}):
        step()
compiled = C._metrics()["programs_compiled"]
res = dict(on=[], off=[])
for i in range({pairs}):
    for on in ((True, False) if i % 2 == 0 else (False, True)):
        C._set_device_checks(on)
        res["on" if on else "off"].append(timed())
res["recompiled"] = C._metrics()["programs_compiled"] - compiled
print("RESULT " + json.dumps(res))
"""

ENV_OFF = r"""
import torch_tpu
print("RESULT " + str(torch_tpu._C._device_checks_enabled()))
"""

MEASURES = ("wall", "host", "device")


def run_child(model, mode, size, pairs, warmup):
    env = {k: v for k, v in os.environ.items() if k != "TORCH_TPU_CHECKS"}
    code = CHILD.format(here=HERE, mode=mode, model=model, size=size, pairs=pairs, warmup=warmup)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=1800)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"child failed ({model}, {mode}):\n{r.stderr[-3000:]}")


def env_switch_works():
    r = subprocess.run([sys.executable, "-c", ENV_OFF], env=dict(os.environ, TORCH_TPU_CHECKS="0"),
                       capture_output=True, text=True, timeout=600)
    return "RESULT False" in r.stdout


def summarise(model, mode, size, runs):
    on = [s for r in runs for s in r["on"]]
    off = [s for r in runs for s in r["off"]]
    row = dict(model=model, mode=mode, size=size, pairs=len(on),
               recompiled_while_timing=sum(r["recompiled"] for r in runs))
    for m in MEASURES:
        row[f"{m}_on_ms"] = 1e3 * statistics.median(s[m] for s in on)
        row[f"{m}_off_ms"] = 1e3 * statistics.median(s[m] for s in off)
        # Steps i of "on" and "off" ran next to each other (ABBA), so their ratio
        # cancels most of the machine's load; the median drops the outliers.
        ratios = [a[m] / b[m] for a, b in zip(on, off) if b[m] > 0]
        row[f"{m}_overhead_pct"] = 100 * (statistics.median(ratios) - 1) if ratios else float("nan")
    for k in ("launches", "to_host"):
        row[f"{k}_per_step_on"] = statistics.median(s[k] for s in on)
        row[f"{k}_per_step_off"] = statistics.median(s[k] for s in off)
    return row


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mingpt,dlrm")
    p.add_argument("--modes", default="defer_and_fuse,strict_eager")
    p.add_argument("--size", default="quick", choices=("smoke", "quick", "full"))
    p.add_argument("--rounds", type=int, default=3, help="child processes per model and mode")
    p.add_argument("--pairs", type=int, default=30, help="(on, off) step pairs per child")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per setting per child")
    a = p.parse_args()
    print(f"TORCH_TPU_CHECKS=0 turns the checks off: {env_switch_works()}", flush=True)
    rows = []
    for model in a.models.split(","):
        for mode in a.modes.split(","):
            runs = [run_child(model, mode, a.size, a.pairs, a.warmup) for _ in range(a.rounds)]
            row = summarise(model, mode, a.size, runs)
            rows.append(row)
            print(f"{model:7s} {mode:15s} " + "  ".join(
                f"{m} {row[f'{m}_on_ms']:.2f}/{row[f'{m}_off_ms']:.2f} ms {row[f'{m}_overhead_pct']:+.1f}%"
                for m in MEASURES) +
                f"  launches {row['launches_per_step_on']:g}/{row['launches_per_step_off']:g}"
                f"  to-host bytes {row['to_host_per_step_on']:g}/{row['to_host_per_step_off']:g}"
                " (on/off)", flush=True)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

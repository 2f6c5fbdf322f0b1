"""Op coverage report: python -m torch_tpu.tools.coverage [--full] [--ops a,b] [--dtypes ...]

Prints, per OpInfo and dtype: native or CPU fallback, samples passed / failed /
expected-fail, then the totals: share of PyTorch's core ATen opset with a native
tpu kernel, and share of OpInfo samples passing among natively lowered ops.
Without --full it checks float32 only (faster).
"""
import argparse
import sys
import warnings

import torch

import torch_tpu

from . import opinfo_check


def core_aten_ops():
    names = []
    for n in torch._C._dispatch_get_all_op_names():
        if not n.startswith("aten::"):
            continue
        base, _, overload = n[6:].partition(".")
        packet = getattr(torch.ops.aten, base, None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        if op is not None and torch.Tag.core in op.tags:
            names.append(n)
    return sorted(set(names))


def has_native_kernel(name):
    """A PrivateUse1 kernel of ours, or a composite that PyTorch implements with
    other ops for every backend (views, factories)."""
    for key in ("PrivateUse1", "CompositeExplicitAutograd",
                "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd"):
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return key
    return None


def _note(r):
    """The first failure, or else which ops fell back to the CPU."""
    if r.first_failure:
        return r.first_failure[:80]
    return ("falls back: " + ",".join(sorted(r.fallback_ops)))[:80] if r.fallback_ops else ""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--full", action="store_true", help="all dtypes and float32 gradients")
    p.add_argument("--ops", default="",
                   help="comma-separated OpInfo names, with or without variant (default: all)")
    p.add_argument("--max-samples", type=int, default=None)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")

    core = core_aten_ops()
    own = [n for n in core if torch._C._dispatch_has_kernel_for_dispatch_key(n, "PrivateUse1")]
    composite = [n for n in core if n not in own and has_native_kernel(n)]
    missing = [n for n in core if n not in own and n not in composite]

    wanted = set(filter(None, args.ops.split(",")))
    dtypes = list(opinfo_check.DTYPES) if args.full else ["float32"]
    results = []
    for op in opinfo_check.op_db():
        full = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if wanted and op.name not in wanted and full not in wanted:
            continue
        for dt in dtypes:
            if not opinfo_check.supports(op, dt):
                continue
            runs = [opinfo_check.check(op, dt, max_samples=args.max_samples)]
            if args.full and dt == "float32" and op.supports_autograd:
                runs.append(opinfo_check.check(op, dt, grad=True, max_samples=args.max_samples))
            results += runs
            for r in runs:
                print(f"{r.op:40s} {r.dtype:9s} {'native' if r.native else 'fallback':8s} "
                      f"pass {r.passed:3d} fail {r.failed:3d} xfail {r.xfailed:3d} "
                      f"fallback {r.fallback:3d} {_note(r)}", flush=True)

    native = [r for r in results if r.fallback == 0]
    n_pass = sum(r.passed for r in native)
    n_all = sum(r.passed + r.failed + r.xfailed for r in native)
    print()
    print(f"core ATen opset: {len(core)} ops; tpu kernel {len(own)} "
          f"({100 * len(own) / len(core):.1f}%), composite of other ops {len(composite)}, "
          f"neither (CPU fallback) {len(missing)}")
    print(f"native incl. composites: {100 * (len(own) + len(composite)) / len(core):.1f}%")
    if n_all:
        print(f"OpInfo samples on natively lowered ops: {n_pass}/{n_all} pass "
              f"({100 * n_pass / n_all:.1f}%); OpInfo entries with fallback: "
              f"{sum(1 for r in results if r.fallback)} of {len(results)}")
    f32 = [r for r in native if r.dtype == "float32" and not r.op.endswith(".grad")]
    f32_pass = sum(r.passed for r in f32)
    f32_all = sum(r.passed + r.failed + r.xfailed for r in f32)
    if args.full and f32_all:
        print(f"  of which float32 forward: {f32_pass}/{f32_all} pass ({100 * f32_pass / f32_all:.1f}%)")
    if missing:
        print("core ops without a tpu kernel:", ", ".join(missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())

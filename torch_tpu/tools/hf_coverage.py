"""Which Transformers architectures run on tpu, and do they match the CPU?

    python -m torch_tpu.tools.hf_coverage                       # every model type, Strict Eager
    python -m torch_tpu.tools.hf_coverage --subset ci           # the ~20 CI architectures
    python -m torch_tpu.tools.hf_coverage --only llama bert --mode defer_and_fuse
    python -m torch_tpu.tools.hf_coverage --mode compiled --jobs 2 --nice 15 --out compiled.tsv
    python -m torch_tpu.tools.hf_coverage --report-only --out strict_eager.tsv --summary s.md

For every model type in Transformers' config registry and every task head it has (base
model, causal LM, masked LM, seq2seq, sequence classification, image classification),
one entry (see hf_entry): a shrunk config, forward on the CPU and on tpu from the same
weights, and (unless --no-train) one backward pass whose gradients are compared too.
Modes: strict_eager, defer_and_fuse, compiled (torch.compile(backend="tpu") of the
forward and backward, the rest in Strict Eager).

Each entry is one row of --out (TSV): status pass / mismatch (largest error, relative to
the CPU output's largest magnitude) / rng (a mismatch, but the CPU's own output changes
with the seed: the model draws random numbers in eval mode, and the device's generator is
another; buildable, not comparable, not counted as matching or failing) / error (the tpu
side raised, crashed or hung) / skip (the CPU side could not build, feed or run it: not
buildable, not counted), the gradient error, seconds, and the ops that fell back to the CPU.

Running a sweep: entries run in worker processes (--jobs of them, each one shard of the
model types), so that a crash or a hang costs one entry, not the sweep: the driver
records it and restarts the worker, which skips the entries already in the table. Rows
are appended as they finish, so a sweep can be read while it runs and resumed after an
interruption by running the same command again (--fresh starts over). Totals per
architecture (an architecture passes when every buildable head passes) and per entry go
to stdout, and with --summary to a markdown file.
"""
import argparse
import collections
import os
import signal
import subprocess
import sys
import time

from .hf_entry import HEADS, MODES, check_one, shrink  # noqa: F401 - shrink is API

CI_SUBSET = ["albert", "bart", "bert", "distilbert", "electra", "falcon", "gemma", "gpt2",
             "gpt_neo", "llama", "mistral", "mixtral", "opt", "phi", "qwen2", "qwen2_moe",
             "qwen3", "roberta", "t5", "vit"]
COLUMNS = ["model_type", "head", "status", "logits_err", "grad_err", "seconds",
           "cpu_fallback_ops", "detail"]
_RECYCLE = 75  # a worker's exit code for "did its share of entries, start a fresh one"
_STACKS_S = 2  # between asking a worker for its stacks and killing it


def _clean(x):
    return str(x).replace("\t", " ").replace("\n", " ")


def _append(fd, fields):
    os.write(fd, ("\t".join(_clean(f) for f in fields) + "\n").encode())  # one write: atomic append


def read_table(path):
    """The rows of a table file as dicts (a missing file is an empty table)."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        lines = f.read().splitlines()
    if not lines:
        return []
    cols = lines[0].split("\t")
    return [dict(zip(cols, line.split("\t"))) for line in lines[1:] if line.strip()]


def _types(args):
    from transformers.models.auto import configuration_auto
    types = args.only or (CI_SUBSET if args.subset == "ci" else sorted(configuration_auto.CONFIG_MAPPING_NAMES))
    return types[:args.limit] if args.limit else types


def _entries(model_type, transformers, modeling_auto):
    for head, mapping in HEADS:
        cls_name = getattr(modeling_auto, mapping).get(model_type)
        if cls_name and isinstance(cls_name, str) and hasattr(transformers, cls_name):
            yield head, cls_name


# ---------------------------------------------------------------- the worker

def _worker(args):
    """Runs this shard's entries that are not in the table yet, appending a row each."""
    if args.nice:
        os.nice(args.nice)
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch_tpu
    import transformers
    from transformers.models.auto import configuration_auto, modeling_auto
    transformers.logging.set_verbosity_error()

    torch_tpu.set_execution_mode("defer_and_fuse" if args.mode == "defer_and_fuse" else "strict_eager")
    k, n = args.shard
    done = {(r["model_type"], r["head"]) for r in read_table(args.out)}
    fd = os.open(args.out, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    # The driver sends SIGUSR1 before killing a worker (an entry past --timeout, or a hang
    # between entries): every thread's Python stack goes to the log (a C-level handler, so
    # it works while the worker is inside C++).
    import faulthandler
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    ran = 0
    for mt in _types(args)[k::n]:
        todo = [(h, c) for h, c in _entries(mt, transformers, modeling_auto) if (mt, h) not in done]
        if not todo:
            continue
        if args.max_per_worker and ran >= args.max_per_worker:
            return _RECYCLE  # bounded memory: the driver starts a fresh worker for the rest
        try:
            cfg = shrink(configuration_auto.CONFIG_MAPPING[mt](), mt)
            cfg_err = None
        except Exception as e:  # noqa: BLE001
            cfg_err = f"config: {type(e).__name__}: {str(e)[:160]}"
        for head, cls_name in todo:
            _set_current(args.current, f"{mt}\t{head}")  # the driver times it, and blames it if we die
            t0 = time.time()
            if cfg_err:
                row = {"status": "skip", "logits_err": "", "grad_err": "", "fallback": {}, "detail": cfg_err}
            else:
                import copy
                try:
                    row = check_one(getattr(transformers, cls_name), copy.deepcopy(cfg), args.mode,
                                    not args.no_train, args.rtol, torch, torch_tpu)
                except Exception as e:  # noqa: BLE001
                    row = {"status": "error", "logits_err": "", "grad_err": "", "fallback": {},
                           "detail": f"{type(e).__name__}: {str(e)[:160]}"}
            _append(fd, [mt, head, row["status"], row["logits_err"], row["grad_err"],
                         f"{time.time() - t0:.1f}", ",".join(sorted(row["fallback"])), row["detail"]])
            _set_current(args.current, "")  # between entries: no clock on us but the hang limit
            ran += 1
            print(f"[shard {k}/{n}] {mt}/{head}: {row['status']} {row['logits_err']} "
                  f"{time.time() - t0:.1f}s", file=sys.stderr, flush=True)
    os.close(fd)
    if os.path.exists(args.current):
        os.remove(args.current)
    return 0


def _set_current(path, entry):
    """The worker's current entry ("model_type\thead", or "" between entries); the file's
    mtime is when it began."""
    with open(path, "w") as f:
        f.write(entry + "\n")


# ---------------------------------------------------------------- the driver

def _worker_argv(args, k, n):
    argv = [sys.executable, "-m", "torch_tpu.tools.hf_coverage", "--worker", "--shard", f"{k}/{n}",
            "--mode", args.mode, "--out", args.out, "--rtol", str(args.rtol),
            "--timeout", str(args.timeout), "--nice", str(args.nice),
            "--max-per-worker", str(args.max_per_worker)]
    if args.no_train:
        argv.append("--no-train")
    if args.limit:
        argv += ["--limit", str(args.limit)]
    if args.only:
        argv += ["--only", *args.only]
    else:
        argv += ["--subset", args.subset]
    return argv


def _run_shards(args):
    """Keeps one worker per shard running until every shard is through. The driver keeps
    the clock: a worker whose entry runs past --timeout is killed, the entry recorded as
    timed out, and the worker restarted (it skips the entries already in the table); so
    is a worker that crashes (the entry recorded as crashed) or hangs between entries.

    The limit is not raised inside the worker: an exception thrown asynchronously (a
    signal handler's) can land in a Python callback that PyTorch's C++ runs, such as a
    dispatch rule looked up under Dynamo's fake tensors, and there it aborts the process
    (pybind11 cannot carry it through a C++ frame that must not throw)."""
    n = args.jobs
    procs = {}
    hang_after = max(args.timeout, 0) + 120  # no entry running and no progress: stuck

    def start(k):
        cur = f"{args.out}.cur{k}"
        if os.path.exists(cur):
            os.remove(cur)
        log = open(f"{args.out}.log{k}", "a")
        procs[k] = (subprocess.Popen(_worker_argv(args, k, n) + ["--current", cur],
                                     stdout=log, stderr=log, start_new_session=True), cur, time.time())

    def current(k):
        """(model_type, head) or None, and since when (the worker's start if no file yet)."""
        _, cur, started = procs[k]
        try:
            with open(cur) as f:
                fields = f.read().strip().split("\t")
            since = max(os.path.getmtime(cur), started)
        except FileNotFoundError:
            return None, started
        return (tuple(fields) if len(fields) == 2 else None), since

    def blame(k, what, seconds=""):
        entry, _ = current(k)
        cur = procs[k][1]
        if os.path.exists(cur):
            os.remove(cur)
        if entry and entry not in {(r["model_type"], r["head"]) for r in read_table(args.out)}:
            fd = os.open(args.out, os.O_WRONLY | os.O_APPEND)
            _append(fd, [*entry, "error", "", "", seconds, "", what])
            os.close(fd)

    def kill(k):
        proc = procs[k][0]
        os.kill(proc.pid, signal.SIGUSR1)  # its stacks into the log first
        time.sleep(_STACKS_S)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    for k in range(n):
        start(k)
    while procs:
        time.sleep(0.25)
        for k in list(procs):
            proc = procs[k][0]
            rc = proc.poll()
            if rc is None:
                entry, since = current(k)
                ran = time.time() - since
                if entry and 0 < args.timeout < ran:
                    with open(f"{args.out}.log{k}", "a") as log:  # the stacks that follow are its
                        log.write(f"\n{entry[0]} {entry[1]}: timed out after {args.timeout}s\n")
                    kill(k)
                    blame(k, f"timed out after {args.timeout}s", f"{ran:.1f}")
                    start(k)
                elif not entry and ran > hang_after:  # stuck starting up or between entries
                    kill(k)
                    start(k)
                continue
            if rc == 0:
                del procs[k]
            elif rc == _RECYCLE:
                start(k)
            else:
                blame(k, f"crashed: worker exit {rc}" + (f" (signal {-rc})" if rc < 0 else ""))
                start(k)


def _drop_unclean(path, types):
    """Rewrites the table without the rows of `types` that did not pass cleanly, so that
    the next run does them again (after a fix)."""
    rows = read_table(path)
    keep = [r for r in rows if r["model_type"] not in types
            or (r["status"] == "pass" and not r["cpu_fallback_ops"])]
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\t".join(COLUMNS) + "\n")
        for r in keep:
            f.write("\t".join(_clean(r.get(c, "")) for c in COLUMNS) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- totals

def summarize(rows):
    """Per-architecture and per-entry totals from table rows."""
    arch = collections.OrderedDict()
    for r in rows:
        arch.setdefault(r["model_type"], []).append(r)
    rank = {"pass": 0, "rng": 1, "mismatch": 2, "error": 3}
    per_arch = {}
    for mt, rs in arch.items():
        built = [r for r in rs if r["status"] in rank]
        if not built:
            continue
        worst = max((r["status"] for r in built), key=rank.get)
        clean = all(r["status"] in ("pass", "mismatch", "rng") and not r["cpu_fallback_ops"] for r in built)
        per_arch[mt] = (worst, clean, built)
    fb = collections.Counter()
    fb_arch = collections.defaultdict(set)
    for r in rows:
        for op in filter(None, r.get("cpu_fallback_ops", "").split(",")):
            fb[op] += 1
            fb_arch[op].add(r["model_type"])
    statuses = collections.Counter(r["status"] for r in rows)
    skips = collections.Counter(r["detail"].split(":")[0] for r in rows if r["status"] == "skip")
    return {
        "types": len(arch), "per_arch": per_arch, "entries": statuses, "skip_reasons": skips,
        "fallback": fb, "fallback_arch": fb_arch,
        "grad_ok": sum(1 for r in rows if r["status"] == "pass" and r["grad_err"] not in ("",)
                       and float(r["grad_err"]) <= 1e-2),
        "grad_run": sum(1 for r in rows if r["status"] == "pass" and r["grad_err"] not in ("",)),
        "entry_clean": sum(1 for r in rows if r["status"] in ("pass", "mismatch") and not r["cpu_fallback_ops"]),
    }


def _pct(a, b):
    return f"{a}/{b} = {100 * a / b:.1f}%" if b else f"{a}/0"


def report_lines(s, mode, train, rtol, markdown=False):
    pa = s["per_arch"]
    random = [mt for mt, (w, _, _) in pa.items() if w == "rng"]
    n = len(pa) - len(random)  # comparable: an architecture random by design is not
    passed = sum(1 for w, _, _ in pa.values() if w == "pass")
    clean = sum(1 for w, c, _ in pa.values() if c and w != "rng")
    e = s["entries"]
    built = e["pass"] + e["mismatch"] + e["error"]  # comparable entries (rng ones aside)
    b = "- " if markdown else "  "
    out = [f"hf_coverage ({mode}, {'forward+backward' if train else 'forward'}, rtol {rtol}): "
           f"{s['types']} model types, {len(pa)} buildable on the CPU"
           + (f", {len(random)} of them random by design (rng: {', '.join(random)})" if random else ""),
           f"{b}architectures matching the CPU (every buildable head): {_pct(passed, n)}",
           f"{b}architectures with no CPU fallback:                  {_pct(clean, n)}",
           f"{b}entries (architecture, head): {sum(e.values())}: {built + e['rng']} buildable, {e['pass']} pass, "
           f"{e['mismatch']} mismatch, {e['error']} error, {e['rng']} rng, {e['skip']} skip",
           f"{b}entries matching the CPU: {_pct(e['pass'], built)}; with no CPU fallback: "
           f"{_pct(s['entry_clean'], built)}; passing with gradients within 1e-2: "
           f"{_pct(s['grad_ok'], s['grad_run'])}",
           f"{b}skipped entries by reason: " + ", ".join(f"{k} {v}" for k, v in s["skip_reasons"].most_common())]
    out.append(f"{b}top fallback ops (entries; architectures): " + ", ".join(
        f"{op} {c}; {len(s['fallback_arch'][op])}" for op, c in s["fallback"].most_common(20)))
    failing = [(mt, r) for mt, (w, _, rs) in pa.items() if w not in ("pass", "rng")
               for r in rs if r["status"] != "pass"]
    heads = len(failing)
    failing += [(mt, r) for mt in random for r in pa[mt][2] if r["status"] == "rng"]
    out.append(f"{b}failing architectures: {n - passed} ({heads} heads)"
               + (f"; and {len(random)} random by design (rng), listed last" if random else ""))
    for mt, r in failing:
        detail = r["detail"] or f"rel err {r['logits_err']}"
        out.append(f"    {mt}/{r['head']}: {r['status']} {detail}"
                   + (f" [fallback: {r['cpu_fallback_ops']}]" if r["cpu_fallback_ops"] else ""))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="Transformers architectures on tpu vs the CPU")
    p.add_argument("--mode", default="strict_eager", choices=MODES)
    p.add_argument("--subset", choices=["all", "ci"], default="all")
    p.add_argument("--only", nargs="*", help="model types to run (default: the subset)")
    p.add_argument("--limit", type=int, default=0, help="at most this many model types")
    p.add_argument("--out", default=None, help="table file (default hf_coverage_<mode>.tsv)")
    p.add_argument("--fresh", action="store_true", help="start the table over instead of resuming it")
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--timeout", type=int, default=120, help="seconds per entry (0: no limit)")
    p.add_argument("--no-train", action="store_true", help="forward only")
    p.add_argument("--jobs", type=int, default=1, help="worker processes (shards of the model types)")
    p.add_argument("--nice", type=int, default=0, help="niceness of the workers")
    p.add_argument("--max-per-worker", type=int, default=150, help="entries before a fresh worker")
    p.add_argument("--retry", action="store_true",
                   help="run again the entries that did not pass cleanly (mismatch, error, skip, CPU fallback)")
    p.add_argument("--summary", help="also write the totals as markdown here")
    p.add_argument("--report-only", action="store_true", help="totals of an existing table, no run")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    p.add_argument("--current", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.out = args.out or f"hf_coverage_{args.mode}.tsv"
    k, n = (int(x) for x in args.shard.split("/"))
    args.shard = (k, n)
    if args.worker:
        args.current = args.current or f"{args.out}.cur{k}"
        return _worker(args)

    t0 = time.time()
    if not args.report_only:
        if args.jobs < 1:
            p.error("--jobs must be at least 1")
        if args.fresh or not os.path.exists(args.out) or os.path.getsize(args.out) == 0:
            with open(args.out, "w") as f:
                f.write("\t".join(COLUMNS) + "\n")
        if args.retry:
            _drop_unclean(args.out, set(_types(args)))
        _run_shards(args)
    rows = read_table(args.out)
    if not args.report_only:  # totals of the entries this command asked for
        wanted = set(_types(args))
        rows = [r for r in rows if r["model_type"] in wanted]
    lines = report_lines(summarize(rows), args.mode, not args.no_train, args.rtol)
    print("\n".join(lines))
    if not args.report_only:
        print(f"  {time.time() - t0:.0f}s; full table: {args.out}")
    if args.summary:
        with open(args.summary, "w") as f:
            f.write(f"# hf_coverage: {args.mode}\n\n" + "\n".join(
                report_lines(summarize(rows), args.mode, not args.no_train, args.rtol, markdown=True)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The parent side of modes.py's and peers.py's benchmark protocol: each mode runs
in its own interpreter, which answers "warmup", "step" and "done" on stdin with one
"RESULT <json>" line each; the parent warms up one mode at a time, then times the
steps in rounds, one step of every mode per round, so that load from elsewhere on
the machine falls on every mode alike. Imports no torch."""
import json
import statistics
import subprocess


class StepChild:
    """One mode's interpreter. `error` is set (and later questions get None) once it
    reports an error or exits."""

    def __init__(self, mode, cmd=None, env=None, quiet=True, error=None):
        self.mode, self.error, self.proc = mode, error, None
        if cmd is not None and error is None:
            self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL if quiet else None, text=True)

    def ask(self, cmd):
        if self.error:
            return None
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
                if "error" in r:
                    self.error = r["error"]
                    return None
                return r
        self.error = f"exited with {self.proc.wait()}"
        return None

    def close(self):
        if self.proc:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            self.proc.wait()


def measure(modes, make, steps):
    """Rows by mode: the warm-up reply, the step times, the last step's other fields,
    the "done" reply and the median time, or the error. `make(mode)` starts a mode's
    StepChild; each starts only when the one before has warmed up, so no start-up
    falls into another mode's first step."""
    children, rows = {}, {}
    for m in modes:
        c = children[m] = make(m)
        rows[m] = dict(times=[], **(c.ask("warmup") or {}))
    for _ in range(steps):
        for m, c in children.items():
            r = c.ask("step")
            if r:
                rows[m]["times"].append(r.pop("time"))
                if "cpu" in r:  # the process's CPU time in the step (all its threads)
                    rows[m].setdefault("cpus", []).append(r.pop("cpu"))
                rows[m].update(r)
    for m, c in children.items():
        r = c.ask("done")
        if r:
            rows[m].update(r, median=statistics.median(rows[m]["times"]))
        else:
            rows[m]["error"] = c.error
        c.close()
    return rows

"""The marimo notebooks in docs/notebooks run top to bottom as scripts, and what
they show holds: the modes agree with the CPU, the loop trains, nothing falls back."""
import os

from conftest import run_python

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NOTEBOOKS = os.path.join(ROOT, "docs", "notebooks")


def run_notebook(name, checks, timeout=400):
    """Runs the notebook's app, every cell in order (`python notebook.py` runs the
    same app.run() under `if __name__ == "__main__"`), and evaluates `checks`, a
    Python expression over the cells' definitions `d`."""
    path = os.path.join(NOTEBOOKS, name)
    code = (f"import runpy; app = runpy.run_path({path!r})['app']; _, d = app.run(); "
            f"ok = {checks}; print('NOTEBOOK', 'OK' if ok else 'FAILED')")
    p = run_python(code, env={"MPLBACKEND": "Agg"}, timeout=timeout)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "NOTEBOOK OK" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]


def test_getting_started():
    run_notebook("getting_started.py",
                 "d['modes_agree'] and d['losses'][-1] < 0.5 * d['losses'][0] "
                 "and d['accuracy'] > 0.9 and d['fallbacks'] == 0 "
                 "and 'programs compiled' in d['report']")


def test_execution_modes():
    run_notebook("execution_modes.py",
                 "d['losses_agree'] and set(d['runs']) >= {'strict_eager', 'defer_and_fuse', "
                 "'compile'} and all(len(t) == 8 for _, t in d['runs'].values())")


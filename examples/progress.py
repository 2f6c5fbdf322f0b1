"""A small progress bar for the examples and benchmarks: tqdm when it is installed,
else a one-line bar of our own (the project does not depend on tqdm).

    bar = progress(range(steps), desc="train")
    for step in bar:
        bar.set_postfix_str(f"loss {loss:.3f}")
"""
import sys
import time


class _Bar:
    """Redraws one line on stderr at most every 0.1 s (redrawing every step would
    cost more than a small step itself); when stderr is not a terminal, a plain line
    every few seconds instead, so that logs stay readable."""

    def __init__(self, iterable, desc="", total=None, file=None):
        self.iterable = iterable
        self.total = total if total is not None else len(iterable)
        self.desc = desc
        self.file = file or sys.stderr
        self.n = 0
        self.postfix = ""
        self.start = time.perf_counter()
        self._drawn = 0.0
        self._tty = self.file.isatty()
        self._every = 0.1 if self._tty else 5.0

    def set_postfix_str(self, text, refresh=True):
        self.postfix = text
        if refresh:
            self._draw()

    def _draw(self, force=False, end=""):
        now = time.perf_counter()
        if not force and now - self._drawn < self._every:
            return
        self._drawn = now
        width = 24
        done = int(width * self.n / max(self.total, 1))
        rate = self.n / max(now - self.start, 1e-9)
        line = (f"{self.desc}: {self.n}/{self.total} [{'#' * done}{'.' * (width - done)}] "
                f"{now - self.start:.1f}s {rate:.2f}it/s {self.postfix}")
        self.file.write(("\r" + line if self._tty else line + "\n") + end)
        self.file.flush()

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.n += 1
            self._draw()
        self._draw(force=True, end="\n" if self._tty else "")

    def close(self):
        pass


def progress(iterable, desc="", total=None, disable=False):
    """Wraps `iterable` in a progress bar (tqdm's if available)."""
    if disable:
        return _Quiet(iterable)
    try:
        from tqdm import tqdm
    except ImportError:
        return _Bar(iterable, desc=desc, total=total)
    return tqdm(iterable, desc=desc, total=total, dynamic_ncols=True)


class _Quiet:
    """The same interface, drawing nothing (for --quiet runs and tests)."""

    def __init__(self, iterable):
        self.iterable = iterable

    def __iter__(self):
        return iter(self.iterable)

    def set_postfix_str(self, text, refresh=True):
        pass

    def close(self):
        pass

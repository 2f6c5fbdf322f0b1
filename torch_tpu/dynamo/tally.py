"""Thread-safe counters with the newest reasons beside them: the statistics that the
compiled mode's buckets (bucketed_graph) and Defer & Fuse's (deferred_buckets) report."""
import threading


class Tally:
    def __init__(self, *keys, keep=32):
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(keys, 0)
        self._reasons = []
        self._keep = keep

    def count(self, key, n=1, why=None):
        with self._lock:
            self._counts[key] += n
            if why:
                self._note(why)

    def reason(self, why):
        with self._lock:
            self._note(why)

    def _note(self, why):
        self._reasons.append(why)
        del self._reasons[:-self._keep]

    def snapshot(self):
        """(the counts as a dict, the reasons newest last)."""
        with self._lock:
            return dict(self._counts), list(self._reasons)

    def reset(self):
        with self._lock:
            for k in self._counts:
                self._counts[k] = 0
            self._reasons.clear()

"""Where a run's wall time went, for --profile: run.json's `timeline_s`, `spares` and `fork_server`, and each
record's `profile` (its stages' wall seconds and each worker command's own seconds)."""

import contextlib
import time

from .envinfo import process_age_s


class Profile:
    def __init__(self):
        self._t0 = time.monotonic() - (process_age_s() or 0.0)
        self.timeline: dict[str, float] = {}
        self.spares: list[dict] = []  # appended by spares' threads: list.append is atomic

    def now(self) -> float:
        """Seconds since run_eval.py started."""
        return round(time.monotonic() - self._t0, 2)

    def mark(self, event: str, once: bool = False) -> None:
        if not (once and event in self.timeline):  # a once-event comes from one thread: no race
            self.timeline[event] = self.now()


@contextlib.contextmanager
def seconds_into(seconds: dict[str, float], name: str):
    """Add the block's wall seconds to seconds[name]."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        seconds[name] = seconds.get(name, 0.0) + time.monotonic() - t0

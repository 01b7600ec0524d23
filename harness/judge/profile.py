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


class Stages(dict):
    """Wall seconds by stage, each second counted once, in the innermost stage open: stages nest (a step, the
    worker start or reference rounds inside it) and still add up to the record's wall time."""

    def __init__(self):
        super().__init__()
        self._open: list[list] = []  # [name, since]

    @contextlib.contextmanager
    def __call__(self, name: str):
        now = time.monotonic()
        if self._open:
            self._add(*self._open[-1], now)
        self._open.append([name, now])
        try:
            yield
        finally:
            end = time.monotonic()
            self._add(*self._open.pop(), end)
            if self._open:
                self._open[-1][1] = end

    def _add(self, name: str, since: float, now: float) -> None:
        self[name] = self.get(name, 0.0) + now - since

"""Ctrl-C: the first is acknowledged at once and the run ends within GRACE_S, every process it started killed;
a second ends it at once. Finished records stay valid (each is appended whole as it finishes) and run.json keeps
`complete: false`, so `--resume DIR` continues the run."""

import os
import signal
import sys
import threading
from pathlib import Path

from .records import STOPPING

GRACE_S = 8.0
EXIT = 130


def descendants(root: int) -> list[int]:
    """Every living process under root, parents before children (workers run in sessions of their own, so a
    process group does not reach them; parentage does)."""
    children: dict[int, list[int]] = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in "ZX":
            children.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def kill_all() -> None:
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def leave(code: int) -> None:
    """Ends an interrupted run now: its lane threads may be inside native code, where the interpreter's own
    exit can abort ("terminate called without an active exception", exit -6 for 130); every record is on disk."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class Interrupts:
    """Installed around a command-line run, in the main thread."""

    def __init__(self, prog: str = "run_eval.py"):
        self.prog, self.count = prog, 0
        self._previous = None

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc) -> None:
        """An interrupted run is ending already: a later Ctrl-C must not cut its exit short with a traceback."""
        if self._previous is not None:
            signal.signal(signal.SIGINT, signal.SIG_IGN if self.count else self._previous)

    def _on_sigint(self, signum, frame) -> None:
        self.count += 1
        STOPPING.set()
        if self.count > 1:
            self._now()
        sys.stderr.write(f"{self.prog}: stopping; finished records are kept (Ctrl-C again to stop at once)\n")
        sys.stderr.flush()
        timer = threading.Timer(GRACE_S, self._now)
        timer.daemon = True
        timer.start()
        raise KeyboardInterrupt

    def _now(self) -> None:
        kill_all()
        sys.stderr.write(f"{self.prog}: stopped\n")
        leave(EXIT)

"""Who may use a device when: timed commands take turns, and a spare worker's start waits for a window."""

import contextlib
import threading

from .builds import RUNNING


class DeviceTurn:
    """Held around every timed command on one device. Lanes that share the device take turns (a reference timed
    beside a candidate on one GPU would slow both); where timing shares its cores with builds (CPU runs, small
    hosts), running builds are paused (SIGSTOP) meanwhile. Spare workers make their CUDA context (0.22-0.29 s on
    the H200) in the turn, only while the lane has untimed work ahead (a record's start and checks, the reference's
    outputs, torch.compile's first calls): one let in between two timed commands would hold the next for all of it."""

    def __init__(self, pause_builds: bool = False):
        self.lock = threading.Lock()
        self.pause_builds = pause_builds
        self.window = threading.Event()
        self.window.set()

    @contextlib.contextmanager
    def __call__(self, pause_builds: bool = False):
        with self.lock, (RUNNING.frozen() if self.pause_builds or pause_builds else contextlib.nullcontext()):
            yield

    def around(self, cmd: str):
        """The turn for a timed worker command; nothing for the others."""
        return self() if cmd in ("time", "graph") else contextlib.nullcontext()

    def open_to_spares(self, is_open: bool) -> None:
        (self.window.set if is_open else self.window.clear)()

    @contextlib.contextmanager
    def for_spare(self, device_step: bool = True):
        """A spare's start waits for the window on every device, so CPU runs take the GPU's way; only a device
        step (a CUDA context) takes the turn."""
        self.window.wait()
        with self() if device_step else contextlib.nullcontext():
            yield

    @contextlib.contextmanager
    def spares_in(self, restore: bool = False):
        """The window open for an untimed stretch of the lane's work, closed again after (restore: left as it
        was). A lane that waits for a spare opens it: a spare waiting for a closed window would never come."""
        was = self.window.is_set()
        self.open_to_spares(True)
        try:
            yield
        finally:
            self.open_to_spares(was if restore else False)

"""A worker's stdout and stderr as a pipe that a thread of the judge drains into its log. The worker then holds
no descriptor that names a file: nothing it holds says where the run's folder is, it cannot seek, truncate or
reopen its log, and a candidate that prints without end fills at most LOG_CAP_BYTES of each log."""

import os
import select
import threading
from pathlib import Path

from ..settings import LOG_CAP_BYTES

POLL_S = 0.2  # how long the thread waits for output before it looks whether it should stop


class LogPump:
    """write_fd goes to the worker as its stdout and stderr and is closed here once the worker has it
    (`handed`); `switch` sends what comes next to another log; `close` drains what the pipe holds and stops.
    The pipe need not reach its end: a process the candidate left behind may hold the write end for ever."""

    def __init__(self, path: Path):
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self._lock = threading.Lock()
        self._file = open(path, "ab")
        self._written = self._dropped = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kbh-log-pump", daemon=True)
        self._thread.start()

    def handed(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def _drain(self) -> bool:
        """What the pipe holds now, up to 4 MiB, into the log (under the lock, so a worker that never stops
        writing cannot keep `switch` and `close` waiting); False once the pipe has ended."""
        for _ in range(64):
            try:
                data = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                return True
            except OSError:
                return False
            if not data:
                return False
            room = max(LOG_CAP_BYTES - self._written, 0)
            if room:
                self._file.write(data[:room])
                self._file.flush()
            self._written += min(room, len(data))
            self._dropped += max(len(data) - room, 0)
        return True

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self.read_fd], [], [], POLL_S)
            except (OSError, ValueError):
                return
            if ready:
                with self._lock:
                    if self._stop.is_set() or not self._drain():
                        return

    def _end_file(self) -> None:
        if self._dropped:
            self._file.write(f"\n[harness: {self._dropped} more bytes of output dropped, past the log's "
                             f"{LOG_CAP_BYTES} bytes]\n".encode())
        self._file.close()

    def switch(self, path: Path) -> None:
        """What the worker writes from now on goes to `path`; what it wrote before stays where it was going."""
        with self._lock:
            self._drain()
            self._end_file()
            self._file = open(path, "ab")
            self._written = self._dropped = 0

    def close(self) -> None:
        self._stop.set()
        self.handed()
        with self._lock:
            if self._file.closed:
                return
            self._drain()
            self._end_file()
            os.close(self.read_fd)
        self._thread.join(timeout=2 * POLL_S)

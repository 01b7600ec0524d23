"""The judge's handles on worker processes: start, ask with a deadline, stop, kill. A worker has a private
socket, its own process group (a kill takes its compilers and threads) and a log; it is a fork of the fork
server where one runs and it runs as the judge's user. A reply too large or not JSON counts as a failure."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from multiprocessing import Pipe
from pathlib import Path

from ..sandbox import own_folder, with_own
from . import forkserver
from .isolation import Identity
from .logpump import LogPump
from .stopping import descendants

MAX_REPLY_BYTES = 64 * 2**20


class WorkerGone(Exception):
    """The worker timed out (kind 'timeout') or died (kind 'died'); it has been killed."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


def describe_exit(code: int | None) -> str:
    if code is None:
        return "worker stopped answering"
    if code == forkserver.LOST:
        return "worker ended; its exit status went with the fork server"
    if code < 0:
        try:
            return f"worker killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"worker killed by signal {-code}"
    return f"worker exited with code {code}"


def _descendants_elsewhere(leaders: list[int]) -> list[int]:
    """Descendants of the leaders in a process group other than their leader's (a child that called setsid)."""
    out = []
    for leader in leaders:
        for pid in descendants(leader):
            with contextlib.suppress(ProcessLookupError):
                if os.getpgid(pid) != leader:
                    out.append(pid)
    return out


@contextlib.contextmanager
def groups_stopped(pids):
    """The process groups led by pids stopped (SIGSTOP) meanwhile, with any descendant that left its group and,
    first, what workers and builds left behind killed (ForkServer.sweep); continued (SIGCONT) after. SIGSTOP
    lands asynchronously, so each leader is awaited until the kernel reports it stopped (or gone)."""
    server = forkserver.current()
    if server is not None and pids:
        server.sweep()
    stopped, singles = [], []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGSTOP)
            stopped.append(pid)
    for _ in range(2):  # again for any started while the first were being stopped
        for pid in _descendants_elsewhere(stopped):
            if pid not in singles:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
                    singles.append(pid)
    for pid in stopped:
        stat, end = Path(f"/proc/{pid}/stat"), time.monotonic() + 0.5
        with contextlib.suppress(OSError, IndexError):  # unreadable: gone
            while time.monotonic() < end and stat.read_text().rsplit(")", 1)[1].split()[0] not in "TtZX":
                time.sleep(0.0005)
    try:
        yield
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGCONT)
        for pid in singles:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)


class WorkerHandle:
    def __init__(self, *, repo_root: Path, env: dict[str, str], log_path: Path, cwd: Path, trusted: bool,
                 identity: Identity | None = None, strict: bool = False):
        """strict (Plan.strict_sandbox): the worker gets a folder of its own beneath the scratch folder `cwd`
        (sandbox.own_folder), its cwd, TMPDIR and output slots, which no other candidate's process may read or
        write; and its stdout and stderr are a pipe the judge drains into its log (logpump.LogPump), not the log
        file itself."""
        parent, child = Pipe(duplex=True)
        self.identity = identity
        self._own = Path(own_folder(cwd)) if strict and identity is None else None
        self.folder = identity.home if identity else self._own or cwd
        mine = identity.env() if identity else {"TMPDIR": str(self._own)} if self._own else {}
        full_env = forkserver.worker_env(repo_root, dict(env, **mine))
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._pump = LogPump(log_path) if strict else None
        self._log = None if strict else open(log_path, "ab")
        out = self._pump.write_fd if self._pump else self._log.fileno()
        cwd = self.folder
        server = forkserver.current() if identity is None else None
        proc = server.fork(full_env, cwd, out, child.fileno()) if server else None
        self.proc = proc or subprocess.Popen(
            [sys.executable, "-m", "harness.worker", str(child.fileno())], pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, env=full_env,
            start_new_session=True, **(identity.popen() if identity else {}))
        child.close()
        if self._pump:
            self._pump.handed()
        self.conn, self.trusted, self.alive = parent, trusted, True

    @property
    def forked(self) -> bool:
        """Whether this worker is a fork of the fork server (else a fresh process)."""
        return isinstance(self.proc, forkserver.ForkedProc)

    def send(self, obj: dict) -> None:
        try:
            self.conn.send_bytes(json.dumps(obj).encode())
        except OSError as e:
            raise self._died(f" ({e})") from None

    def _wait(self, timeout: float) -> None:
        if not self.conn.poll(timeout := max(timeout, 0.0)):
            self.kill()
            raise WorkerGone("timeout", f"no answer within {timeout:.0f} s (the rest of its time limit)")

    def recv(self, timeout: float) -> dict:
        self._wait(timeout)
        try:
            reply = json.loads(self.conn.recv_bytes(None if self.trusted else MAX_REPLY_BYTES))
            if not isinstance(reply, dict):
                raise ValueError("reply is not an object")
            return reply
        except (EOFError, OSError, ValueError) as e:
            raise self._died("" if isinstance(e, EOFError) else f" ({type(e).__name__})") from None

    def recv_frame(self, nbytes: int, timeout: float) -> bytearray:
        """One raw data frame of a known size, received into a writable buffer (no extra copy)."""
        buf = bytearray(nbytes)
        self._wait(timeout)
        try:
            n = self.conn.recv_bytes_into(buf)
        except (EOFError, OSError, BufferError):
            raise self._died() from None
        if n != nbytes:
            raise WorkerGone("died", f"data frame of {n} bytes, expected {nbytes}")
        return buf

    def frozen(self):
        """The worker's process group stopped meanwhile: while the reference is timed beside a candidate, no
        thread the candidate left behind can take the lane's core or launch GPU work."""
        return groups_stopped([self.proc.pid] if self.alive else [])

    def sandbox(self, spec: dict | None) -> dict | None:
        """The run's sandbox for this worker: its own folder to write and read as well."""
        return with_own(spec, self.folder)

    def use_log(self, path: Path) -> bool:
        """The worker's log from here on: True where the judge writes it (strict); else the worker opens it
        itself (the `log` command), under a user of its own once the judge has made the file theirs."""
        if self._pump is not None:
            self._pump.switch(path)
            return True
        if self.identity is not None:
            path.touch(mode=0o600)
            os.chown(path, self.identity.uid, self.identity.uid)
        return False

    def request(self, cmd: str, timeout: float, **args) -> dict:
        self.send({"cmd": cmd, **args})
        return self.recv(timeout)

    def _died(self, detail: str = "") -> WorkerGone:
        """Kill the worker; the error that says how it ended (None: not reaped within kill's wait)."""
        self.kill()
        return WorkerGone("died", describe_exit(self.proc.poll()) + detail)

    def stop(self) -> None:
        """SIGKILL the worker's process group and return at once; kill() or close() reaps it later."""
        if self.alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        if self.alive:
            self.stop()
            self.alive = False
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            self.conn.close()
            (self._pump or self._log).close()
            if self.identity is not None:
                self.identity.end()
            if self._own is not None:
                shutil.rmtree(self._own, ignore_errors=True)

    def close(self) -> None:
        if self.alive:
            with contextlib.suppress(WorkerGone):
                self.request("exit", timeout=5)
            self.kill()


def judge_timed(worker: WorkerHandle, seeds: list[int], projection: bool,
                timeout: float) -> tuple[list[tuple[float, int, list]], list[float]]:
    """Time calls with the judge's own clock, alternating with no-op round trips that draw and fingerprint the
    same: each call's (microseconds, seed, fingerprints), and the no-ops' microseconds. seeds[k] goes out only
    when round k's clock starts; even rounds call the model, odd ones do not."""
    worker.send({"cmd": "judge_timed", "rounds": len(seeds), "projection": projection})
    deadline = time.monotonic() + timeout
    calls, noops = [], []
    msg: dict = {}
    for k, seed in enumerate(seeds):
        msg = worker.recv(deadline - time.monotonic())
        if "ready" not in msg:
            break
        kind = "noop" if k % 2 else "call"
        t0 = time.perf_counter()
        worker.send({"go": kind, "seed": seed})
        msg = worker.recv(deadline - time.monotonic())
        t1 = time.perf_counter()
        if "done" not in msg:
            break
        if kind == "call":
            calls.append(((t1 - t0) * 1e6, seed, msg.get("fp")))
        else:
            noops.append((t1 - t0) * 1e6)
    else:
        msg = worker.recv(deadline - time.monotonic())
    if not msg.get("ok", True) and "ready" not in msg and "done" not in msg:
        raise RuntimeError(msg.get("message", "judge-timed calls failed"))
    return calls, noops

"""The judge's side of the fork server (harness.worker.forkserver_main): start it, ask it for forks, wait.
A process whose environment differs from the server's in what starting reads (START_PREFIXES, less LATE_KEYS)
starts afresh, as do processes under a user of their own (--isolate) and all once the server is gone."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..settings import CLEAR_STALE_LOCK_ENV

LATE_KEYS = frozenset({"CUDA_VISIBLE_DEVICES", "TORCH_CUDA_ARCH_LIST", "KBH_TOOLCHAIN", "TORCHINDUCTOR_CACHE_DIR",
                       "TRITON_CACHE_DIR", "TRITON_HOME", "CUDA_CACHE_PATH", "KBH_PCH", "TMPDIR",
                       CLEAR_STALE_LOCK_ENV})
"""The lane's keys, which a worker's `init` applies after it starts, and a build's, read when it compiles;
TMPDIR, which a fork re-reads (`tempfile.tempdir` reset)."""

START_PREFIXES = ("PYTHON", "LD_", "MALLOC", "TORCH", "PYTORCH", "CUDA", "CUBLAS", "NCCL", "TRITON", "OMP_",
                  "GOMP_", "KMP_", "MKL_", "OPENBLAS", "HOME", "TMPDIR", "TEMP", "TMP", "XDG_", "KBH_")
"""Variables an interpreter, torch or the harness may read while starting or importing."""

WORKER_HASH_SEED = "0"
"""Every worker hashes strings the same way: with a random seed per process, 3 of 9 processes on the H200
host timed the seed reference 3.7-7.0% slow in every pass (host phase divided out), none of 18 with a fixed
seed more than 2.5%; reference and candidate run in separate processes, so it would enter a speedup."""

READY_TIMEOUT_S = 180.0
REPLY_TIMEOUT_S = 30.0
LOST = -255
"""Exit code of a forked process whose status went with a fork server that died first."""


class ForkedProc:
    """Popen's pid, poll and wait for a forked worker, answered by the server that reaps it. wait() sleeps on a
    pidfd, so waiting costs no requests. It opens one per sleep and sleeps only if no poll reaped the pid before
    (a poll holds the lock until it has set returncode): the pidfd cannot name a reused pid."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: int | None = None
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                self.returncode = self.server.poll(self.pid)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        end = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while self.poll() is None:
            left = None if end is None else end - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            try:
                fd = os.pidfd_open(self.pid)
            except (AttributeError, OSError):  # no pidfds here: sleep between polls
                time.sleep(pause if left is None else min(pause, left))
                pause = min(0.05, 2 * pause)
                continue
            try:
                with self._lock:
                    reaped = self.returncode is not None
                if not reaped:
                    select.select([fd], [], [], left)
            finally:
                os.close(fd)
        return self.returncode


class ForkServer:
    def __init__(self, env: dict[str, str]):
        self.env = dict(env)
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        fd, log = tempfile.mkstemp(prefix="kbh-forkserver-", suffix=".log")
        self.log_path = Path(log)
        argv = [sys.executable, "-m", "harness.worker.forkserver_main", str(theirs.fileno())]
        self.proc = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=fd,
                                     stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        os.close(fd)
        theirs.close()
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.status = "starting"
        self.info: dict = {}
        self.forks = self.declined = 0

    def _ready(self) -> bool:
        """Wait for the server's imports (once); False if it failed: the judge then starts fresh processes."""
        if self.status == "starting":
            self._sock.settimeout(READY_TIMEOUT_S)
            try:
                self.info = json.loads(self._sock.recv(1 << 16) or b"{}")
            except (OSError, ValueError):
                self.info = {}
            ok = self.info.get("ready") and not self.info.get("cuda_loaded")
            self.status = "ready" if ok else "failed"
            self.info["ready_after_s"] = round(time.monotonic() - self.started, 2)
            if not ok:
                self._stop_server()
        return self.status == "ready"

    def _ask(self, msg: dict, fds: tuple[int | None, ...] = ()) -> dict | None:
        try:
            self._sock.settimeout(REPLY_TIMEOUT_S)
            socket.send_fds(self._sock, [json.dumps(msg).encode()], [fd for fd in fds if fd is not None])
            return json.loads(self._sock.recv(1 << 16))  # b"" (the server closed its socket) is no JSON
        except (OSError, ValueError):
            self.status = "lost"
            self._stop_server()
            return None

    def fork(self, env: dict[str, str], cwd: Path, log_fd: int, conn_fd: int | None = None,
             build: list[str] | None = None) -> ForkedProc | None:
        """A worker serving the judge on conn_fd (or a `harness.worker.build_main` build with these
        arguments), or None where the environment needs a fresh process or the server is gone."""
        differs = {k for k in env.keys() | self.env.keys() if env.get(k) != self.env.get(k)
                   and k.startswith(START_PREFIXES) and k not in LATE_KEYS}
        with self.lock:
            if differs or not self._ready():
                self.declined += 1
                return None
            reply = self._ask({"op": "fork", "env": env, "cwd": str(cwd), "build": build}, (log_fd, conn_fd))
            if not reply or "pid" not in reply:
                self.declined += 1
                if reply is not None:  # refused (the driver started in it): ask no more
                    self.status = "refused"
                    self.info["refused"] = reply.get("error", "")
                    self._stop_server()
                return None
            self.forks += 1
            return ForkedProc(self, reply["pid"])

    def poll(self, pid: int) -> int | None:
        with self.lock:
            if self.status == "ready":
                reply = self._ask({"op": "poll", "pid": pid})
                if reply is not None:
                    return LOST if reply.get("lost") else reply.get("code")
        # the server is gone: its children were handed to init, which reaps them
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                return None
        return LOST

    def sweep(self) -> list[int]:
        """Kill what the workers and builds left running outside their process groups (forkserver_main.sweep)."""
        with self.lock:
            reply = self._ask({"op": "sweep"}) if self.status == "ready" else None
        return (reply or {}).get("killed", [])

    def _stop_server(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        """Stop the server (its forked workers are the judge's to stop) and drop its log."""
        if self.status == "ready":
            self.sweep()
        if self.status in ("starting", "ready"):
            self.status = "closed"
        self._stop_server()
        self._sock.close()
        self.log_path.unlink(missing_ok=True)

    def summary(self) -> dict:
        return {"status": self.status, "forks": self.forks, "declined": self.declined, **self.info}


_CURRENT: list[ForkServer] = []


def jit_cache_env(home: Path) -> dict[str, str]:
    """Where Triton, inductor and the CUDA driver keep their caches, all under `home`: a worker's or build's
    own (builds.candidate_env, isolation.Identity) or the reference's (guard.reference_cache)."""
    return {"TRITON_HOME": str(home), "TRITON_CACHE_DIR": str(home / ".triton" / "cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(home / "inductor"), "CUDA_CACHE_PATH": str(home / ".nv" / "ComputeCache")}


def worker_env(repo_root: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A worker's starting environment: the judge's and extra, the repo on PYTHONPATH, unbuffered output,
    WORKER_HASH_SEED. Nothing else that changes timing: candidates and references run as users run them."""
    return {**os.environ, **(extra or {}), "PYTHONUNBUFFERED": "1",
            "PYTHONHASHSEED": WORKER_HASH_SEED,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")]))}


def start(repo_root: Path) -> ForkServer:
    stop()
    _CURRENT.append(ForkServer(worker_env(repo_root)))
    return _CURRENT[-1]


def current() -> ForkServer | None:
    return _CURRENT[-1] if _CURRENT else None


def stop() -> None:
    while _CURRENT:
        _CURRENT.pop().close()

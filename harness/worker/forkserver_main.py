"""The fork server: imports torch and the worker once, then forks each worker and build in milliseconds (a
fresh worker's imports took 9.6-11 s of a core under load on the H200 host). No candidate code runs here."""

import contextlib
import ctypes
import gc
import importlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
import traceback

CUDA_ERROR_NOT_INITIALIZED = 3
PR_SET_CHILD_SUBREAPER = 36


def cuda_loaded() -> bool:
    """Whether the CUDA driver has started here (a fork could not use the GPU); asking its device count does
    not start it."""
    from .clocks import mapped_libraries  # after the timed imports: it imports torch

    for path in mapped_libraries("libcuda.so"):
        try:
            count = ctypes.c_int(0)
            if ctypes.CDLL(path).cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED:
                return True
        except (OSError, AttributeError):
            return True
    return False


def _child(ctrl: socket.socket, fds: list[int], msg: dict) -> None:
    """Become the worker or build: own session, closed server socket, log as stdout and stderr, cwd, env."""
    code = 1
    try:
        ctrl.close()
        log_fd = fds[0]
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null)
        os.close(log_fd)
        os.chdir(msg["cwd"])
        os.environ.clear()
        os.environ.update(msg["env"])
        tempfile.tempdir = None  # read again from TMPDIR (the run's scratch: candidates may not write /tmp itself)
        if msg.get("build"):
            from .build_main import main as build

            code = build(*msg["build"])
        else:
            from .__main__ import main

            main(fds[1])
            code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _orphans(children: set[int]) -> list[int]:
    """This server's children it did not fork: processes a worker or build started and left (a daemon from a
    double fork), handed here as the subreaper, not to init."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) not in children:
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
    return found


def _kill(pid: int) -> None:
    """SIGKILL to the process group pid leads, and to pid itself where it leads none."""
    for kill in (os.killpg, os.kill):
        with contextlib.suppress(OSError):
            kill(pid, signal.SIGKILL)


def sweep(children: set[int]) -> list[int]:
    """Kill every orphan, reaping those already gone without waiting (one holding a CUDA context takes a while
    to go; the next sweep reaps it): nothing a candidate started outlives the process it started from."""
    found = _orphans(children)
    for pid in found:
        _kill(pid)
    for pid in found:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    return found


def serve(fd: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    ctrl = socket.socket(fileno=fd)
    t0 = time.monotonic()
    importlib.import_module("harness.worker.commands")
    importlib.import_module("torch._dynamo")
    gc.collect()
    gc.freeze()
    ctrl.send(json.dumps({"ready": True, "import_s": round(time.monotonic() - t0, 3),
                          "cuda_loaded": cuda_loaded(),
                          "threads": len(os.listdir("/proc/self/task"))}).encode())
    children: set[int] = set()
    while True:
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, 1 << 20, 2)
        except OSError:
            break
        if not data:
            break
        msg = json.loads(data)
        reply: dict = {}
        if msg["op"] == "fork":
            if cuda_loaded():
                reply = {"error": "the CUDA driver is loaded in the fork server"}
            else:
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _child(ctrl, fds, msg)
                children.add(pid)
                reply = {"pid": pid}
        elif msg["op"] == "poll":
            try:
                done, status = os.waitpid(msg["pid"], os.WNOHANG)
                reply = {"code": os.waitstatus_to_exitcode(status) if done else None}
                if done:
                    children.discard(msg["pid"])
            except ChildProcessError:
                children.discard(msg["pid"])
                reply = {"lost": True}
        elif msg["op"] == "sweep":
            reply = {"killed": sweep(children)}
        for f in fds:
            os.close(f)
        ctrl.send(json.dumps(reply).encode())
    _end(children)


def _end(children: set[int]) -> None:
    """The judge's socket closed: the judge is gone (a normal stop kills this server first). Nothing else would
    stop the workers it left, a stopped one (frozen while the reference is timed) least of all, nor free their
    GPU memory: each one's process group is killed, and every orphan. Unreaped, none of these pids can name
    another process."""
    for pid in children:
        _kill(pid)
    for pid in children:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    sweep(set())
    os._exit(0)


if __name__ == "__main__":
    serve(int(sys.argv[1]))

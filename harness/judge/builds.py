"""Candidate building: each candidate imported in a build process of its own (harness.worker.build_main), with
no GPU visible, a time limit and its compiler output in a log, in a pool sized from cores and memory."""

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..cachekeys import build_memo_key, partial_header
from ..errors import UsageError, read_text
from ..sandbox import own_folder, with_own
from ..settings import CLEAR_STALE_BUILD_LOCK, CLEAR_STALE_LOCK_ENV
from . import forkserver, isolation
from .buildcache import adopt_staged, memo_lookup, memo_store
from .processes import groups_stopped


class RunningBuilds:
    """Build process groups running: paused while their cores time something, killed if a run stops early."""

    def __init__(self):
        self._lock = threading.Lock()
        self._names: dict[int, str] = {}

    def add(self, pid: int, name: str) -> None:
        with self._lock:
            self._names[pid] = name

    def remove(self, pid: int) -> None:
        with self._lock:
            self._names.pop(pid, None)

    @contextlib.contextmanager
    def frozen(self, except_name: str | None = None):
        """Every running build stopped (SIGSTOP) but one's, continued afterwards."""
        with groups_stopped(self._pids(except_name)):
            yield

    def _pids(self, except_name: str | None = None) -> list[int]:
        with self._lock:
            return [pid for pid, name in self._names.items() if name != except_name]

    def kill_all(self) -> None:
        for pid in self._pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


RUNNING = RunningBuilds()


@dataclass(frozen=True)
class Candidate:
    name: str
    path: Path
    source: str
    sha256: str
    copy_path: Path
    error: str | None = None  # why the file cannot be read: the candidate gets runtime_error records, no build

    @property
    def native_kind(self) -> str:
        if "cuda_sources" in self.source or ".cu" in self.source:
            return "cuda"
        if "load_inline" in self.source or "cpp_extension" in self.source:
            return "cpp"
        return "python"


@dataclass(frozen=True)
class BuildResult:
    status: str
    message: str = ""
    seconds: float = 0.0
    cached: bool = False
    log: str = ""
    pch: bool = False  # main.cpp compiled with the cache's precompiled torch/extension.h
    memo: bool = False  # found in the cache's record of earlier builds: no build process ran
    ext_root: str | None = None  # --isolate: the candidate's own folder of the cache, its worker loads from


def read_candidate(path: Path) -> tuple[str, str | None]:
    """The candidate's text, or "" and one line on why it cannot be read (gone, unreadable, not UTF-8)."""
    try:
        return read_text(path, "Python source file"), None
    except UsageError as e:
        return "", str(e)


def snapshot_candidate(path: Path, name: str, src_dir: Path) -> Candidate:
    """A private copy of the candidate: what the static checks read is what the workers import."""
    text, error = read_candidate(path)
    digest = hashlib.sha256(text.encode()).hexdigest()
    copy = src_dir / digest[:16] / path.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(text)
    return Candidate(name=name, path=path, source=text, sha256=digest, copy_path=copy, error=error)


def default_jobs(reserved_cores: int = 1) -> int:
    """Builds in parallel: two per core left after the evaluation lane, at most one per 3 GB of memory.
    A build runs its two compiles (main.cpp, the .cu) at once, at falling priority (build_nice): one past the
    core count runs on the CPU time the earlier ones leave, where one waiting for a slot waits a whole build
    (on the H200 host, one slot short, the 16th of 16 candidates ended 8-10 s after the others)."""
    cores = len(os.sched_getaffinity(0))
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        mem_gb = 8
    return max(1, min(2 * (cores - reserved_cores), int(mem_gb // 3)))


def build_nice(order: int) -> int:
    """Priority of the build submitted order-th: the earliest finish first, so the GPU starts evaluating while
    later builds run rather than after one long wait. All yield to the judge and the workers (nice 0)."""
    return min(19, 1 + order)


def candidate_env(scratch: Path, home: Path | None = None) -> dict[str, str]:
    """Where processes that run candidate code (builds, workers) keep temporary files (scratch/tmp) and the caches
    Triton, inductor and the CUDA driver write (under `home`, default scratch/home): inside the write sandbox.
    Their defaults (~/.triton, ~/.nv) lie outside it where the repo is under the home folder. Triton loads the
    libraries it caches, so `home` belongs on a disk that allows it, not a noexec /dev/shm."""
    return {"TMPDIR": str(scratch / "tmp"), **forkserver.jit_cache_env(home or scratch / "home")}


def lock_env(device: str) -> dict[str, str]:
    """Whether builds on `device` remove a dead build's lock (settings.CLEAR_STALE_BUILD_LOCK)."""
    return {CLEAR_STALE_LOCK_ENV: "1"} if device in CLEAR_STALE_BUILD_LOCK else {}


def build_env(arch: str | None, toolchain: str, scratch: Path, home: Path | None = None) -> dict[str, str]:
    """A build's environment: with `arch`, a CUDA run's (no GPU visible to it); without, a CPU run's."""
    return {"CUDA_VISIBLE_DEVICES": "", "MAX_JOBS": "2", "KBH_TOOLCHAIN": toolchain, **candidate_env(scratch, home),
            **({"TORCH_CUDA_ARCH_LIST": arch} if arch else {}), **lock_env("cuda" if arch else "cpu")}


def memo_place(cand: Candidate, full_env: dict[str, str], cache_dir: Path, isolate: bool) -> tuple[str, Path]:
    """A candidate's memo key and the extensions' folder: the shared cache, or under --isolate one of the
    candidate's own named by its memo key, which only the judge writes: no other candidate's build can place a
    library there."""
    key = build_memo_key(cand.sha256, full_env)
    return key, cache_dir / "by-source" / key if isolate else cache_dir


def memo_hit(cand: Candidate, *, repo_root: Path, cache_dir: Path, env: dict[str, str], isolate: bool) -> bool:
    """run_build would start no build process: the cache holds the candidate's whole build."""
    key, root = memo_place(cand, forkserver.worker_env(repo_root, env), cache_dir, isolate)
    return memo_lookup(root, key) is not None


def run_build(cand: Candidate, *, repo_root: Path, cache_dir: Path, env: dict[str, str], timeout_s: float,
              log_path: Path, scratch: Path, cores: list[int] | None, nice: int = 0,
              isolate: bool = False, sandbox: dict | None = None, own: bool = False) -> BuildResult:
    """Build in a process of its own, unless the cache holds every extension an earlier build of the same
    source in the same environment made (buildcache.memo_lookup): a warm batch starts no build process.
    own: the process gets a folder of its own beneath scratch (its cwd, TMPDIR and result), as workers do."""
    t0 = time.monotonic()
    full_env = forkserver.worker_env(repo_root, env)
    memo_key, root = memo_place(cand, full_env, cache_dir, isolate)
    if isolate:
        root.mkdir(parents=True, exist_ok=True)
    ext_root, log = (str(root) if isolate else None), str(log_path)
    if memo_lookup(root, memo_key) is not None:
        return BuildResult("built", "", time.monotonic() - t0, cached=True, memo=True, ext_root=ext_root)
    ident = isolation.new_identity() if isolate else None
    own = Path(own_folder(scratch)) if own and ident is None else None
    try:
        result_path = scratch / f"build-{cand.sha256[:16]}-{os.getpid()}-{time.monotonic_ns()}.json"
        cwd, as_user = scratch, {}
        if own is not None:
            full_env, sandbox = dict(full_env, TMPDIR=str(own)), with_own(sandbox, own)
            result_path, cwd = own / "result.json", own
        if ident is not None:
            full_env = dict(full_env, **ident.env())
            result_path, cwd, as_user = ident.home / "result.json", ident.home, ident.popen()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab", buffering=0) as log_file:
            log_file.write(f"== build {cand.path} ==\n".encode())
            args = [str(cand.copy_path), str(result_path), str(root), json.dumps(sandbox)]
            server = forkserver.current() if ident is None else None
            proc = server.fork(full_env, cwd, log_file.fileno(), build=args) if server else None
            proc = proc or subprocess.Popen([sys.executable, "-m", "harness.worker.build_main", *args],
                                            cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=log_file,
                                            stderr=subprocess.STDOUT, start_new_session=True, **as_user)
            if cores:
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(proc.pid, cores)
            if nice:
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, proc.pid, nice)
            RUNNING.add(proc.pid, cand.name)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return BuildResult("timeout", f"build exceeded its {timeout_s:.0f} s limit",
                                   time.monotonic() - t0, log=log)
            finally:
                RUNNING.remove(proc.pid)
        seconds = time.monotonic() - t0
        try:
            with isolation.open_regular(result_path) as f:
                data = dict(json.loads(f.read()))
            result_path.unlink()
        except (OSError, ValueError, TypeError):
            message = f"build process ended without a result (exit code {proc.returncode})"
            return BuildResult("deferred", message, seconds, log=log, ext_root=ext_root)
        events = data.get("events") or []
        events = events if isinstance(events, list) and all(isinstance(ev, dict) for ev in events) else []
        if ident is not None:
            adopt_staged(root, ident.staging, events)
        cached = bool(events) and all(ev.get("cached") for ev in events)
        if data.get("status") == "built":
            memo_store(root, memo_key, events)
            return BuildResult("built", "", seconds, cached, log, any(ev.get("pch") for ev in events), ext_root=ext_root)
        # any failure but a compiler error (no ModelNew, ...) is decided by the worker, with the device visible
        status = "compile_error" if data.get("status") == "compile_error" else "deferred"
        return BuildResult(status, data.get("message", ""), seconds, cached and status == "deferred", log,
                           ext_root=ext_root)
    finally:
        if ident is not None:
            ident.end()
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)


class HeaderBuild:
    """torch/extension.h precompiled into the cache by the judge (`extcache --pch`, no candidate code), used
    by builds whose compile starts once it is complete. CPU runs (main.cpp is the whole compile) make it first
    and wait; CUDA builds (the .cu, the longer half, cannot use it) start at once and it is made once one
    really compiles, so an all-cached run spends no core on it."""

    def __init__(self, cache_dir: Path, toolchain: str, repo_root: Path, env: dict[str, str], log_path: Path,
                 timeout_s: float, cores: list[int] | None = None):
        self.folder: str | None = None
        self.seconds: float | None = None
        self.status = "not started"
        self._args = [sys.executable, "-m", "harness.worker.extcache", "--pch", str(cache_dir), toolchain]
        self._env = forkserver.worker_env(repo_root, env)
        self._log, self._timeout, self._cores, self._cache = log_path, timeout_s, cores, Path(cache_dir)
        self._proc: subprocess.Popen | None = None
        self._done = threading.Event()

    def start(self) -> None:
        self.status = "building"
        t0 = time.monotonic()
        with open(self._log, "ab") as log:
            self._proc = subprocess.Popen(self._args, env=self._env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        if self._cores:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(self._proc.pid, self._cores)

        def finish() -> None:
            try:
                out = self._proc.communicate(timeout=self._timeout)[0].decode(errors="replace")
                line = next((ln for ln in out.splitlines() if ln.startswith("PCH ")), "")
                self.folder = line[4:].strip() or None
                if self.status != "stopped":
                    self.status = "ready" if self.folder else "none" if self._proc.returncode == 0 else "failed"
            except subprocess.TimeoutExpired:
                self.stop()
                self.status = "timeout"
            self.seconds = time.monotonic() - t0
            self._done.set()

        threading.Thread(target=finish, name="kbh-pch", daemon=True).start()

    def wait(self) -> None:
        self._done.wait()

    def stop(self) -> None:
        """Kill a header build still running when the run ends, and drop its partial file."""
        if self._proc is not None and self._proc.poll() is None:
            self.status = "stopped"
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
            for tmp in (self._cache / "pch").glob(f"*/torch/{partial_header(self._proc.pid)}"):
                tmp.unlink(missing_ok=True)

    def info(self) -> dict:
        return {"status": self.status, "folder": self.folder,
                "seconds": round(self.seconds, 2) if self.seconds is not None else None}


class BuildPool(ThreadPoolExecutor):
    def __init__(self, jobs: int):
        super().__init__(max_workers=max(1, jobs), thread_name_prefix="kbh-build")

    def shutdown(self, wait: bool = False, *, cancel_futures: bool = True) -> None:
        """Cancel queued builds and kill running ones (a run that stops early must not wait for them)."""
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        RUNNING.kill_all()

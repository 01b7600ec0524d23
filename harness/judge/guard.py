"""Guard of the harness's tree and the run's results folder against writes by candidates: a protected file
changed, added or deleted is restored (or removed) and named at the check after each build and evaluation, the
candidates whose code ran since the last clean check the suspects (TamperWatch). The results folder may hold
only the judge's files; results.jsonl must read exactly as the judge wrote it."""

import contextlib
import shutil
import threading
from pathlib import Path

from .. import sandbox
from .builds import RUNNING, run_build
from .records import RecordWriter

PROTECTED = ("harness", "problems", "configs", "run_eval.py")
KEPT_DIR = "times"
RESULT_FILES = {"results.jsonl", "run.json", "summary.csv", "summary.md", "summary.json"}


SCRATCH_PREFIX = "kbh-scratch-"


def reference_cache(cache_dir: Path) -> Path:
    """The reference worker's Triton, inductor and CUDA caches: beside the build cache, kept between runs, and
    never writable to candidate code (a planted entry would change the compiled reference it is timed against)."""
    return cache_dir.with_name(cache_dir.name + "-reference")


def write_sandbox(repo_root: Path, out_dir: Path, cache_dir: Path, scratch: Path, *more: Path,
                  strict: bool = False) -> tuple[dict | None, str]:
    """What processes that run candidate code may not write (the repo, the results, the reference's caches, the
    other processes' own folders), what they may (the build cache, the run's scratch folders), for
    `harness.sandbox.restrict`. `strict` (settings.STRICT_SANDBOX): nothing but the latter and device nodes, and
    no file read of the run's folder, the results folder beside the repo, the other processes' own folders or
    other runs' scratch (`sandbox.with_own` adds each process's own). None where the kernel has no Landlock.
    And a line for run.json, which also names strict's other defences (a pipe for output, hooks and the collector
    off)."""
    abi = sandbox.abi_version()
    also = (("; candidate output through a pipe, candidate hooks off around timed calls, the collector off in "
             "timed commands") if strict else "")
    if abi < 1:
        return None, f"none: Landlock is not available on this kernel (the guard restores changes instead){also}"
    spec = {"protect": [str(repo_root), str(out_dir), str(reference_cache(cache_dir))],
            "allow": [str(cache_dir), str(scratch), *map(str, more)], "allowlist": strict}
    if not strict:  # workers and builds share the scratch folder, and write their files in it
        return spec, f"landlock ABI {abi}: no writes to the repo, the run's files or the reference's caches"
    own = str(scratch / sandbox.OWN)
    hide = [str(out_dir), str(repo_root / "results"), own, str(scratch.parent / f"{SCRATCH_PREFIX}*")]
    how = ("writes only to its scratch, TMPDIR, the build and JIT caches and device nodes; no reads of the run's "
           "files, other runs' or other candidates' files")
    return {**spec, "protect": [*spec["protect"], own], "hide": hide}, f"landlock ABI {abi}: {how}{also}"


class TreeGuard:
    def __init__(self, repo_root: Path, out_dir: Path, writer: RecordWriter,
                 extra_roots: tuple[Path, ...] = ()):
        self.repo_root, self.out_dir, self.writer = repo_root, out_dir, writer
        self.roots = [repo_root / p for p in PROTECTED] + list(extra_roots)
        self.saved = {p: p.read_bytes() for p in self._files()}
        self.allowed_logs: set[str] = set()
        kept = out_dir / KEPT_DIR  # a resumed run's earlier files are the judge's too
        self.kept = {p.name: p.read_bytes() for p in kept.iterdir() if p.is_file()} if kept.is_dir() else {}
        self._lock = threading.Lock()

    def _files(self) -> list[Path]:
        return [p for root in self.roots for p in ([root] if root.is_file() else root.rglob("*"))
                if p.is_file() and "__pycache__" not in p.parts]

    def allow_log(self, name: str) -> None:
        self.allowed_logs.add(name)

    def protect(self, write):
        """write() makes a file of the judge's after the start (a candidate fed to an open run) and returns it
        with its path, under the lock a check holds, so no check sees it half made; it must then read the same."""
        with self._lock:
            made, path = write()
            self.saved[path] = path.read_bytes()
            return made

    def keep(self, name: str, data: bytes) -> Path:
        """A file of the judge's own, under the run's `times` folder: it must read the same at each check."""
        path = self.out_dir / KEPT_DIR / name
        with self._lock:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            self.kept[name] = data
        return path

    def check(self) -> list[str]:
        """Undo every change found; return what was changed, as paths relative to the repo or run."""
        with self._lock:
            changed = []
            now = set(self._files())
            for p, data in self.saved.items():
                if p not in now or p.read_bytes() != data:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(self.saved[p])
                    changed.append(self._rel(p))
            for p in now - set(self.saved):
                p.unlink(missing_ok=True)
                changed.append(self._rel(p))
            if not self.writer.intact():
                self.writer.restore()
                changed.append(self._rel(self.writer.path))
            changed.extend(self._foreign_results())
            return changed

    def _foreign_results(self) -> list[str]:
        """Move whatever the judge did not write there to the run's quarantine folder; name it."""
        found: list[str] = []
        if not self.out_dir.is_dir():
            return found
        quarantine, logs, kept = (self.out_dir / d for d in ("quarantine", "logs", KEPT_DIR))

        def move(p: Path, name: str) -> None:
            found.append(self._rel(p))
            quarantine.mkdir(exist_ok=True)
            shutil.move(str(p), quarantine / name)

        for folder, allowed in ((self.out_dir, {*RESULT_FILES, "logs", "quarantine", KEPT_DIR}),
                                (logs, self.allowed_logs)):
            for p in folder.iterdir() if folder.is_dir() else ():
                if p.name not in allowed:
                    move(p, p.name)
        for p in kept.iterdir() if kept.is_dir() else ():
            if self.kept.get(p.name) is None or not p.is_file() or p.read_bytes() != self.kept[p.name]:
                move(p, f"{KEPT_DIR}.{p.name}")
        for name, data in self.kept.items():
            if not (kept / name).is_file():
                kept.mkdir(parents=True, exist_ok=True)
                (kept / name).write_bytes(data)
        return found

    def _rel(self, p: Path) -> str:
        return next((str(p.relative_to(b)) for b in (self.repo_root, self.out_dir.parent) if p.is_relative_to(b)),
                    str(p))


class Gate:
    """Lanes pass it shared around each worker command; tamper attribution takes it alone."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            self._cond.wait_for(lambda: not self._writer)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:  # held to the end (let go only while waiting): no lane, no other exclusive enters
            self._writer = True  # no lane enters while those inside finish their command
            self._cond.wait_for(lambda: not self._readers)
            try:
                yield
            finally:
                self._writer = False
                self._cond.notify_all()


class TamperWatch:
    """Pins a change to the protected files on the candidate that made it. With builds beside an evaluation,
    every evaluation is held between commands (the gate) and each building candidate is imported again alone,
    the other builds stopped: one that writes again is the culprit, else the candidate under evaluation is."""

    def __init__(self, guard: TreeGuard):
        self.guard = guard
        self.gate = Gate()
        self.lock = threading.Lock()
        self.building: dict[str, tuple] = {}  # name -> (candidate, run_build's keyword arguments)
        self.evaluating: set[str] = set()
        self.found: dict[str, list[str]] = {}
        self.warnings: list[str] = []

    def build_started(self, name: str, cand, kwargs: dict) -> None:
        with self.lock:
            self.building[name] = (cand, kwargs)

    def build_ended(self, name: str) -> None:
        self.check()
        with self.lock:
            self.building.pop(name, None)

    @contextlib.contextmanager
    def evaluation(self, name: str):
        with self.lock:
            self.evaluating.add(name)
        try:
            yield
        finally:
            with self.lock:
                self.evaluating.discard(name)

    def check(self) -> None:
        """Restore any change to the protected files and name who made it."""
        with self.lock:
            changed = self.guard.check()
            if not changed:
                return
            with self.gate.exclusive():
                evaluating, builders = sorted(self.evaluating), sorted(self.building)
                guilty = [n for n in builders if self._writes_again(n)]
            guilty = guilty or evaluating or builders or ["(unknown)"]
            for name in guilty:
                self.found.setdefault(name, []).extend(changed)
            self.warnings.append(f"{', '.join(guilty)} changed {', '.join(changed)} (restored)")

    def _writes_again(self, name: str) -> bool:
        cand, kwargs = self.building[name]
        with RUNNING.frozen(except_name=name):
            self.guard.check()
            run_build(cand, **kwargs)
            return bool(self.guard.check())

    def tampered_by(self, name: str) -> list[str]:
        self.check()
        return list(dict.fromkeys(self.found.get(name, [])))

"""Guard of the harness's tree and of the run's results folder against writes by candidates.

The judge hashes its protected files at start and checks them after every build and every
evaluation: a changed, added or deleted file is restored (or removed) and named, and the candidates
whose code ran since the last clean check are the suspects. The results folder may hold only the
files the judge writes; results.jsonl must read exactly as the judge wrote it.
"""

from __future__ import annotations

import hashlib
import shutil
import threading
from pathlib import Path

from .records import RecordWriter

PROTECTED = ("harness", "problems", "configs", "run_eval.py")
KEPT_DIR = "times"
RESULT_FILES = {"results.jsonl", "run.json", "summary.csv", "summary.md", "summary.json"}


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class TreeGuard:
    def __init__(self, repo_root: Path, out_dir: Path, writer: RecordWriter, extra_roots: tuple[Path, ...] = ()):
        self.repo_root = repo_root
        self.out_dir = out_dir
        self.writer = writer
        self.roots = [repo_root / p for p in PROTECTED] + list(extra_roots)
        self.saved = {p: p.read_bytes() for p in self._files()}
        self.hashes = {p: hashlib.sha256(b).hexdigest() for p, b in self.saved.items()}
        self.allowed_logs: set[str] = set()
        kept = out_dir / KEPT_DIR  # a resumed run's earlier files are the judge's too
        self.kept: dict[str, bytes] = {p.name: p.read_bytes() for p in kept.iterdir() if p.is_file()} if kept.is_dir() else {}
        self._lock = threading.Lock()

    def _files(self) -> list[Path]:
        files = []
        for root in self.roots:
            if root.is_file():
                files.append(root)
            elif root.is_dir():
                files.extend(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        return files

    def allow_log(self, name: str) -> None:
        self.allowed_logs.add(name)

    def keep(self, name: str, data: bytes) -> Path:
        """Write a file of the judge's own under the run's `times` folder; it must read the same at every check."""
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
            for p, digest in self.hashes.items():
                if p not in now or _hash(p) != digest:
                    p.parent.mkdir(parents=True, exist_ok=True)
                    p.write_bytes(self.saved[p])
                    changed.append(self._rel(p))
            for p in now - set(self.hashes):
                p.unlink(missing_ok=True)
                changed.append(self._rel(p))
            if not self.writer.intact():
                self.writer.restore()
                changed.append(self._rel(self.writer.path))
            changed.extend(self._foreign_results())
            return changed

    def _foreign_results(self) -> list[str]:
        found = []
        if not self.out_dir.is_dir():
            return found
        quarantine = self.out_dir / "quarantine"
        for p in self.out_dir.iterdir():
            if p.name in RESULT_FILES or p.name in ("logs", "quarantine", KEPT_DIR):
                continue
            found.append(self._rel(p))
            quarantine.mkdir(exist_ok=True)
            shutil.move(str(p), quarantine / p.name)
        logs = self.out_dir / "logs"
        if logs.is_dir():
            for p in logs.iterdir():
                if p.name not in self.allowed_logs:
                    found.append(self._rel(p))
                    quarantine.mkdir(exist_ok=True)
                    shutil.move(str(p), quarantine / p.name)
        kept = self.out_dir / KEPT_DIR
        if kept.is_dir():
            for p in kept.iterdir():
                if self.kept.get(p.name) is None or not p.is_file() or p.read_bytes() != self.kept[p.name]:
                    found.append(self._rel(p))
                    quarantine.mkdir(exist_ok=True)
                    shutil.move(str(p), quarantine / f"{KEPT_DIR}.{p.name}")
        for name, data in self.kept.items():
            if not (kept / name).is_file():
                kept.mkdir(parents=True, exist_ok=True)
                (kept / name).write_bytes(data)
        return found

    def _rel(self, p: Path) -> str:
        for base in (self.repo_root, self.out_dir.parent):
            try:
                return str(p.relative_to(base))
            except ValueError:
                continue
        return str(p)

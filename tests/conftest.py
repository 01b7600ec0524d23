"""Shared fixtures: one build cache per test session, and a runner for run_eval.py in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "tests" / "configs"
CANDIDATES = REPO / "tests" / "candidates"

_IDENTITY_MODEL = """
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    return [torch.ones(4, device="{device}")]
"""


def probe_problem(at_import: str, device: str = "cpu") -> str:
    """A problem file for worker tests: `at_import` runs when the worker loads it (os and torch imported), then an
    identity Model on one small input."""
    return "import os\nimport torch\n" + at_import + _IDENTITY_MODEL.format(device=device)


def init_worker(w, tmp_path: Path, text: str, timeout: float = 300, **kwargs) -> dict:
    """Send a worker its init with the problem text (role reference, device cpu unless kwargs say otherwise)."""
    args = {"role": "reference", "device": "cpu", "fp_seed": 1, "cache_dir": str(tmp_path / "cache")} | kwargs
    src = {"name": "probe", "path": str(tmp_path / "probe.py"), "text": text}
    return w.request("init", timeout, problem_src=src, **args)


def judged(r: dict) -> list[str]:
    """A record's flags that judge the candidate: all but the information-only ones (verdict.INFO), such as
    `unstable`, which a busy host's timing noise alone can set on an honest candidate."""
    from harness.judge.verdict import INFO

    return [f for f in r["flags"] if f not in INFO]


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@dataclass
class RunResult:
    rc: int
    stdout: str
    stderr: str
    out: Path
    records: list[dict] = field(default_factory=list)

    @property
    def run_json(self) -> dict:
        return json.loads((self.out / "run.json").read_text())

    def by(self, solution: str, shape: str | None = None) -> dict:
        hits = [r for r in self.records if r["solution"] == solution and (shape is None or r["shape"] == shape)]
        assert hits, f"no record for {solution}/{shape}; have {[(r['solution'], r['shape']) for r in self.records]}"
        return hits[0]


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory) -> Path:
    """One build cache for the whole session (KBH_TEST_CACHE shares it across sessions)."""
    shared = os.environ.get("KBH_TEST_CACHE")
    if shared:
        Path(shared).mkdir(parents=True, exist_ok=True)
        return Path(shared)
    return tmp_path_factory.mktemp("kbh-cache")


@pytest.fixture(scope="session")
def run_eval(build_cache, tmp_path_factory):
    def run(config: Path | None, *args: str, out: Path | None = None, timeout: float = 1800,
            env: dict[str, str] | None = None) -> RunResult:
        out = out or tmp_path_factory.mktemp("run")
        cmd = [sys.executable, str(REPO / "run_eval.py"), *([str(config)] if config else []), "--cache",
               str(build_cache), "--out", str(out), *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO,
                           env=dict(os.environ, **(env or {})))
        path = out / "results.jsonl"
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        return RunResult(p.returncode, p.stdout, p.stderr, out, records)

    return run


def fresh_cache_with_header(build_cache, dest):
    """A cache with no builds in it, holding the session's precompiled header where one exists: the candidate
    compiles here, never answered by an earlier run's build."""
    dest.mkdir()
    if (build_cache / "pch").is_dir():
        shutil.copytree(build_cache / "pch", dest / "pch")
    return dest


def live_children() -> list[int]:
    """Processes whose parent is this one and that have not ended (zombies excluded)."""
    kids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == os.getpid() and fields[0] not in "ZX":
            kids.append(int(pid))
    return kids


@dataclass
class ForeignFolders:
    """Folders other programs own on the host, made writable to all: one of another program's, another run's
    output folder (an empty results.jsonl in it) and one in /dev/shm; `env` names them to a cheat (WRITE_INTO)."""

    other: Path
    another_run: Path
    shm: Path

    @property
    def env(self) -> dict[str, str]:
        return {"WRITE_INTO": os.pathsep.join(map(str, (self.other, self.another_run, self.shm)))}

    def untouched(self) -> bool:
        return (list(self.other.iterdir()) == [] and list(self.shm.iterdir()) == []
                and [p.name for p in self.another_run.iterdir()] == ["results.jsonl"]
                and (self.another_run / "results.jsonl").read_text() == "")


@pytest.fixture
def foreign_folders(tmp_path):
    f = ForeignFolders(tmp_path / "other_program", tmp_path / "another_run",
                       Path(tempfile.mkdtemp(prefix="kbh-test-other-", dir="/dev/shm")))
    for folder in (f.other, f.another_run):
        folder.mkdir()
    (f.another_run / "results.jsonl").write_text("")
    for folder in (f.other, f.another_run, f.shm):
        os.chmod(folder, 0o777)
    yield f
    shutil.rmtree(f.shm, ignore_errors=True)

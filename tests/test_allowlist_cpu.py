"""The allowlist sandbox of CPU runs: candidate processes (builds and workers) write only to their scratch,
TMPDIR and caches; a folder another program owns on the host, made writable to all, another run's output
folder and /dev/shm outside the run's scratch are left as they were, while honest candidates build and run."""

import json
import os
import tempfile
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO
from harness import sandbox

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sandbox.abi_version() < 1, reason="Landlock is not available on this kernel")]


def test_candidates_write_nowhere_else_on_the_host(run_eval, tmp_path):
    other, another_run = tmp_path / "other_program", tmp_path / "another_run"
    shm = Path(tempfile.mkdtemp(prefix="kbh-test-other-", dir="/dev/shm"))
    for folder in (other, another_run):
        folder.mkdir()
    (another_run / "results.jsonl").write_text("")
    for folder in (other, another_run, shm):
        os.chmod(folder, 0o777)
    try:
        res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--static-checks", "off", "--shapes", "tiny",
                       "--solution", str(REPO / "solutions" / "pack_tokens" / "cpu_cpp.py"),
                       str(CANDIDATES / "isolation" / "write_elsewhere.py"),
                       env={"WRITE_INTO": os.pathsep.join(map(str, (other, another_run, shm)))})
        assert res.rc == 0, res.stderr[-2000:]
        assert {r["solution"]: r["status"] for r in res.records} == {"cpu_cpp": "correct", "write_elsewhere": "correct"}
        assert list(other.iterdir()) == [] and list(shm.iterdir()) == []
        assert [p.name for p in another_run.iterdir()] == ["results.jsonl"]
        assert (another_run / "results.jsonl").read_text() == ""
        assert "writes only to" in json.loads((res.out / "run.json").read_text())["write_sandbox"]
    finally:
        for p in shm.iterdir():
            p.unlink()
        shm.rmdir()

"""The allowlist sandbox of CPU runs: candidate processes (builds and workers) write only to their scratch,
TMPDIR and caches; a folder another program owns on the host, made writable to all, another run's output
folder and /dev/shm outside the run's scratch are left as they were, while honest candidates build and run."""

import json

import pytest

from conftest import CANDIDATES, CONFIGS, REPO
from harness import sandbox

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(sandbox.abi_version() < 1, reason="Landlock is not available on this kernel")]


def test_candidates_write_nowhere_else_on_the_host(run_eval, foreign_folders):
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cpu", "--static-checks", "off", "--shapes", "tiny",
                   "--solution", str(REPO / "solutions" / "pack_tokens" / "cpu_cpp.py"),
                   str(CANDIDATES / "isolation" / "write_elsewhere.py"), env=foreign_folders.env)
    assert res.rc == 0, res.stderr[-2000:]
    assert {r["solution"]: r["status"] for r in res.records} == {"cpu_cpp": "correct", "write_elsewhere": "correct"}
    assert foreign_folders.untouched()
    assert "writes only to" in json.loads((res.out / "run.json").read_text())["write_sandbox"]

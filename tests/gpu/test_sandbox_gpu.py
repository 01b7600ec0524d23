"""The allowlist sandbox on a CUDA run: a candidate that writes into a folder another program owns (made
writable to all), another run's output folder and /dev/shm changes nothing there, and is evaluated as usual."""

import json
import os
import tempfile
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS
from harness import sandbox
from harness.settings import SANDBOX_ALLOWLIST

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(sandbox.abi_version() < 1, reason="Landlock is not available on this kernel"),
              pytest.mark.skipif("cuda" not in SANDBOX_ALLOWLIST, reason="the allowlist is off on CUDA runs")]


def test_gpu_candidates_write_nowhere_else_on_the_host(run_eval, tmp_path):
    other, another_run = tmp_path / "other_program", tmp_path / "another_run"
    shm = Path(tempfile.mkdtemp(prefix="kbh-test-other-", dir="/dev/shm"))
    for folder in (other, another_run):
        folder.mkdir()
    (another_run / "results.jsonl").write_text("")
    for folder in (other, another_run, shm):
        os.chmod(folder, 0o777)
    try:
        res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cuda", "--static-checks", "off", "--shapes", "tiny",
                       "--solution", str(CANDIDATES / "isolation" / "write_elsewhere.py"),
                       env={"WRITE_INTO": os.pathsep.join(map(str, (other, another_run, shm)))})
        assert res.rc == 0, res.stderr[-2000:]
        assert res.by("write_elsewhere", "tiny")["status"] == "correct"
        assert list(other.iterdir()) == [] and list(shm.iterdir()) == []
        assert [p.name for p in another_run.iterdir()] == ["results.jsonl"]
        assert "writes only to" in json.loads((res.out / "run.json").read_text())["write_sandbox"]
    finally:
        for p in shm.iterdir():
            p.unlink()
        shm.rmdir()

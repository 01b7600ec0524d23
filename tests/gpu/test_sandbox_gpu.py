"""The strict sandbox on a CUDA run: a candidate that writes into a folder another program owns (made writable to
all), another run's output folder and /dev/shm changes nothing there, and is evaluated as usual; one that reads
its run's files and other processes' output slots reads nothing."""

import json

import pytest

from conftest import CANDIDATES, CONFIGS
from harness import sandbox
from harness.settings import STRICT_SANDBOX

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(sandbox.abi_version() < 1, reason="Landlock is not available on this kernel"),
              pytest.mark.skipif("cuda" not in STRICT_SANDBOX, reason="the strict sandbox is off on CUDA runs")]


def test_gpu_candidates_write_nowhere_else_on_the_host(run_eval, foreign_folders):
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cuda", "--static-checks", "off", "--shapes", "tiny",
                   "--solution", str(CANDIDATES / "isolation" / "write_elsewhere.py"), env=foreign_folders.env)
    assert res.rc == 0, res.stderr[-2000:]
    assert res.by("write_elsewhere", "tiny")["status"] == "correct"
    assert foreign_folders.untouched()
    assert "writes only to" in json.loads((res.out / "run.json").read_text())["write_sandbox"]


def test_gpu_candidates_read_nothing_of_their_run(run_eval):
    res = run_eval(CONFIGS / "cpu_tiny.yaml", "--device", "cuda", "--static-checks", "off", "--shapes", "tiny",
                   "--solution", str(CANDIDATES / "cheats" / "read_run.py"),
                   str(CANDIDATES / "isolation" / "write_elsewhere.py"))
    assert res.rc == 0, res.stderr[-2000:]
    assert res.by("read_run", "tiny")["status"] == "correct", res.by("read_run", "tiny")
    assert "no reads of" in json.loads((res.out / "run.json").read_text())["write_sandbox"]

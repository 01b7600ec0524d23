"""Ctrl-C ends a run soon with its finished records kept and every process it started gone; a second ends it at
once. run.json says the run is incomplete, so --resume continues it."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import CANDIDATES, CONFIGS, REPO

pytestmark = pytest.mark.slow


def workers() -> set[int]:
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"harness.worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_keeps_finished_records_and_leaves_no_process(build_cache, tmp_path, presses):
    before = workers()
    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, str(REPO / "run_eval.py"), str(CONFIGS / "cpu_tiny.yaml"), "--device", "cpu",
                          "--shapes", "tiny", "--cache", str(build_cache), "--out", str(out), "--solution",
                          str(CANDIDATES / "honest" / "python_cpu.py"), str(CANDIDATES / "broken" / "hangs.py")],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = out / "results.jsonl"
    end = time.monotonic() + 600
    while time.monotonic() < end and not (records.exists() and records.read_text().strip()):
        time.sleep(0.2)  # the honest candidate is done; the hanging one is being evaluated
    assert p.poll() is None, p.communicate()
    finished = records.read_text()  # one candidate's record; the other is being evaluated
    for _ in range(presses):
        p.send_signal(signal.SIGINT)
        time.sleep(0.1)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "stopping; finished records are kept" in err and "Traceback" not in err
    assert records.read_text() == finished and len(finished.splitlines()) == 1
    assert json.loads(finished)["status"] in ("correct", "timeout")
    run = json.loads((out / "run.json").read_text())
    assert run["complete"] is False
    if presses == 1:  # ended in its grace period: its seeds written once its processes were killed
        assert {"master", "salt", "shapes"} <= set(run["seeds"]), run["seeds"]
    time.sleep(1)
    assert workers() <= before

"""How the judge starts processes: a run that stops on bad input leaves none behind; a candidate worker gets its
lane's environment, the run's folder and its device step from its first commands."""

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, init_worker, probe_problem

PROBLEM = probe_problem('print("PROBE", os.environ.get("KBH_PROBE"), flush=True)\n')


def test_bad_input_exits_2_and_leaves_no_process(tmp_path):
    mark = secrets.token_hex(8)
    p = subprocess.run([sys.executable, str(REPO / "run_eval.py"), str(tmp_path / "missing.yaml")],
                       capture_output=True, text=True, cwd=REPO, timeout=120, env=dict(os.environ, KBH_MARK=mark))
    assert p.returncode == 2 and "missing.yaml" in p.stderr and "Traceback" not in p.stderr
    time.sleep(0.5)
    left = []
    for env in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"KBH_MARK={mark}".encode() in env.read_bytes():
                left.append(env.parent.name)
        except OSError:
            continue
    assert left == []


def test_a_candidate_worker_takes_its_lanes_environment_the_runs_folder_and_its_device_step(tmp_path):
    """What a lane sends a spare: init with the lane's environment and the run's scratch folder, then the device step
    (on a GPU, inside the device's turn) with the poisoned block shared among the lane's spares."""
    from harness.judge.processes import WorkerHandle

    w = WorkerHandle(repo_root=REPO, env={}, log_path=tmp_path / "spare.lane0.log", cwd=tmp_path, trusted=False)
    try:
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        reply = init_worker(w, tmp_path, PROBLEM, role="candidate", device_now=False, env={"KBH_PROBE": "spare-env"},
                            cwd=str(scratch))
        assert reply["ok"], reply
        assert os.readlink(f"/proc/{w.proc.pid}/cwd") == str(scratch)
        reply = w.request("device", 120, poison_bytes=2**20, holders=5)
        assert reply["ok"], reply
        assert "PROBE spare-env" in (tmp_path / "spare.lane0.log").read_text()
    finally:
        w.close()

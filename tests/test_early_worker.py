"""The first reference worker is started before the judge imports torch (workers.spawn_early)."""

import sys

from conftest import REPO

PROBLEM = """
import os
import torch
print("PROBE", os.environ.get("KBH_PROBE"), flush=True)
class Model(torch.nn.Module):
    def forward(self, x):
        return x
def get_inputs():
    return [torch.ones(4)]
"""


def test_an_early_worker_gets_its_log_and_its_lanes_environment(tmp_path):
    from harness import workers

    workers.spawn_early(REPO)
    w = workers.take_early()
    assert w is not None and workers.take_early() is None
    try:
        early_log = w.log_path
        w.move_log(tmp_path / "reference.lane0.log", 60)
        assert not early_log.exists() and w.log_path == tmp_path / "reference.lane0.log"
        src = {"name": "probe", "path": str(tmp_path / "probe.py"), "text": PROBLEM}
        reply = w.request("init", 300, role="reference", device="cpu", problem_src=src, fp_seed=1,
                          cache_dir=str(tmp_path / "cache"), env={"KBH_PROBE": "lane-env"})
        assert reply["ok"], reply
        w.request("ping", 30)
        assert "PROBE lane-env" in (tmp_path / "reference.lane0.log").read_text()
    finally:
        w.close()


def test_discarded_early_workers_are_killed():
    from harness import workers

    workers.spawn_early(REPO)
    w = workers._EARLY[0]
    workers.discard_early()
    assert w.proc.poll() is not None and not w.log_path.exists()
    assert workers.take_early() is None


def test_bad_input_exits_2_and_leaves_no_early_worker(tmp_path):
    import os
    import secrets
    import subprocess
    import time
    from pathlib import Path

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

"""The first reference worker, and on GPU hosts the first lane's spares, are started before the judge imports torch
(workers.spawn_early)."""

import sys

import pytest

from conftest import REPO, init_worker, probe_problem

PROBLEM = probe_problem('print("PROBE", os.environ.get("KBH_PROBE"), flush=True)\n')


def test_an_early_worker_gets_its_log_and_its_lanes_environment(tmp_path):
    from harness import workers

    workers.spawn_early(REPO)
    w = workers.take_early()
    assert w is not None and workers.take_early() is None
    try:
        early_log = w.log_path
        w.move_log(tmp_path / "reference.lane0.log", 60)
        assert not early_log.exists() and w.log_path == tmp_path / "reference.lane0.log"
        reply = init_worker(w, tmp_path, PROBLEM, env={"KBH_PROBE": "lane-env"})
        assert reply["ok"], reply
        w.request("ping", 30)
        assert "PROBE lane-env" in (tmp_path / "reference.lane0.log").read_text()
    finally:
        w.close()


def test_discarded_early_workers_are_killed():
    from harness import workers

    workers.spawn_early(REPO, spares=2)
    started = workers._EARLY["reference"] + workers._EARLY["spare"]
    assert len(started) == 3
    workers.discard_early()
    assert all(w.proc.poll() is not None and not w.log_path.exists() for w in started)
    assert workers.take_early() is None and workers.take_early("spare") is None


def test_early_spares_are_candidate_workers_apart_from_the_reference():
    from harness import workers

    workers.spawn_early(REPO, spares=2)
    try:
        ref, a, b = workers.take_early(), workers.take_early("spare"), workers.take_early("spare")
        assert ref.trusted and not a.trusted and not b.trusted  # replies of spares are size-limited
        assert len({ref.proc.pid, a.proc.pid, b.proc.pid}) == 3 and workers.take_early("spare") is None
        a.kill()
        workers._EARLY["spare"].append(a)
        assert workers.take_early("spare") is None  # a dead one is dropped, not handed out
    finally:
        for w in (ref, b):
            w.kill()
        workers.discard_early()


@pytest.mark.parametrize("argv, env, expected", [
    (["c.yaml", "--device", "cpu"], {}, 0),
    (["c.yaml", "--device=cpu"], {}, 0),
    (["c.yaml", "--build-only"], {}, 0),
    (["c.yaml"], {"CUDA_VISIBLE_DEVICES": ""}, 0),
    (["c.yaml", "--device", "cpu"], {"KBH_EARLY_SPARES": "3"}, 3),
    (["c.yaml"], {"KBH_EARLY_SPARES": "x"}, 0),
])
def test_early_spares_only_where_a_gpu_run_is_likely(monkeypatch, argv, env, expected):
    from harness import workers

    monkeypatch.delenv("KBH_EARLY_SPARES", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert workers.early_spares(argv) == expected


def test_bad_input_exits_2_and_leaves_no_early_worker(tmp_path):
    import os
    import secrets
    import subprocess
    import time
    from pathlib import Path

    mark = secrets.token_hex(8)
    p = subprocess.run([sys.executable, str(REPO / "run_eval.py"), str(tmp_path / "missing.yaml")],
                       capture_output=True, text=True, cwd=REPO, timeout=120,
                       env=dict(os.environ, KBH_MARK=mark, KBH_EARLY_SPARES="2"))
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


def test_an_early_spare_takes_the_runs_folder_and_its_device_step(tmp_path):
    """What the runner sends a lane's spare: init with the lane's environment and the run's scratch folder, then
    the device step (on a GPU, inside the device's turn) with the poisoned block shared among the lane's spares."""
    import os

    from harness import workers

    workers.spawn_early(REPO, spares=1)
    w = workers.take_early("spare")
    try:
        w.move_log(tmp_path / "spare.lane0.log", 60)
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
        workers.discard_early()

"""Workers forked from one server that imported torch once (harness.forkserver): the same worker as a fresh process
in what the judge relies on (session, cwd, environment, log, exit status), with no way back to the server."""

import os
import signal
import subprocess

import pytest

from conftest import REPO, init_worker, probe_problem

PROBLEM = probe_problem('print("PROBE", os.environ.get("KBH_TOOLCHAIN"), flush=True)\n')


@pytest.fixture()
def server():
    from harness.judge import forkserver

    s = forkserver.start(REPO)
    yield s
    forkserver.stop()


def _handle(tmp_path, name="w", env=None, trusted=True):
    from harness.judge.processes import WorkerHandle

    return WorkerHandle(repo_root=REPO, env=env or {}, log_path=tmp_path / f"{name}.log", cwd=tmp_path, trusted=trusted)


def _stat(pid: int) -> list[str]:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()


def test_a_forked_worker_has_its_own_session_cwd_environment_and_log(server, tmp_path):
    w = _handle(tmp_path, env={"KBH_TOOLCHAIN": "lane-toolchain"})
    try:
        assert w.forked and isinstance(w.proc.pid, int)
        reply = init_worker(w, tmp_path, PROBLEM, timeout=120)
        assert reply["ok"], reply
        state, ppid, pgrp, session = _stat(w.proc.pid)[:4]
        assert int(ppid) == server.proc.pid  # a fork, not a fresh interpreter
        assert int(pgrp) == int(session) == w.proc.pid  # killpg and SIGSTOP reach it and only it
        assert os.readlink(f"/proc/{w.proc.pid}/cwd") == str(tmp_path)
        assert "PROBE lane-toolchain" in (tmp_path / "w.log").read_text()
        assert server.summary()["forks"] == 1 and server.summary()["status"] == "ready"
    finally:
        w.close()
    assert w.proc.returncode is not None and not os.path.exists(f"/proc/{w.proc.pid}")


def test_a_forked_worker_holds_no_socket_but_its_own(server, tmp_path):
    """The server's control socket is closed in the child: a candidate cannot ask the server for forks or for
    another worker's exit status."""
    w = _handle(tmp_path, trusted=False)
    try:
        assert w.forked and w.request("ping", 60).get("ok")
        fd_dir = f"/proc/{w.proc.pid}/fd"
        sockets = [f for f in os.listdir(fd_dir) if os.readlink(f"{fd_dir}/{f}").startswith("socket:")]
        assert len(sockets) == 1
    finally:
        w.kill()


def test_a_crash_in_a_forked_worker_reads_as_the_signal_that_killed_it(server, tmp_path):
    from harness.judge.processes import WorkerGone

    w = _handle(tmp_path, trusted=False)
    assert w.forked and w.request("ping", 60).get("ok")
    os.kill(w.proc.pid, signal.SIGSEGV)
    with pytest.raises(WorkerGone) as e:
        w.request("ping", 30)
    assert e.value.kind == "died" and "SIGSEGV" in str(e.value)
    assert w.proc.returncode == -signal.SIGSEGV
    assert not os.path.exists(f"/proc/{w.proc.pid}")  # reaped once the judge asked, as a Popen child is


def test_a_worker_whose_start_environment_differs_is_started_fresh(server, tmp_path):
    """PYTHON* variables act at an interpreter's start, which a fork does not have."""
    w = _handle(tmp_path, env={"PYTHONWARNINGS": "ignore::UserWarning"})
    try:
        assert not w.forked and isinstance(w.proc, subprocess.Popen)
        assert w.request("ping", 120).get("ok")
        assert server.summary()["declined"] == 1
    finally:
        w.kill()


def test_workers_start_fresh_once_the_server_is_gone(server, tmp_path):
    from harness.judge import forkserver

    first = _handle(tmp_path, name="first")
    assert first.forked and first.request("ping", 60).get("ok")
    os.killpg(server.proc.pid, signal.SIGKILL)
    server.proc.wait()
    try:
        assert first.proc.poll() is None  # still alive: read from /proc, not from the dead server
        assert first.request("ping", 60).get("ok")
        second = _handle(tmp_path, name="second")
        try:
            assert not second.forked and second.request("ping", 120).get("ok")
        finally:
            second.kill()
    finally:
        first.kill()
    assert first.proc.returncode in (forkserver.LOST, -signal.SIGKILL)


def test_a_build_is_forked_too_and_runs_at_the_nice_it_was_given(server, tmp_path):
    from harness.judge.builds import run_build, snapshot_candidate

    seen = tmp_path / "seen.txt"
    path = tmp_path / "cand.py"
    path.write_text(f"import os\nopen({str(seen)!r}, 'w').write(f'{{os.nice(0)}} {{os.getppid()}} "
                    f"{{os.environ[\"CUDA_VISIBLE_DEVICES\"]!r}}')\n"
                    "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n")
    cand = snapshot_candidate(path, "cand", tmp_path / "src")
    result = run_build(cand, repo_root=REPO, cache_dir=tmp_path / "cache", env={"CUDA_VISIBLE_DEVICES": ""},
                       timeout_s=120, log_path=tmp_path / "build.log", scratch=tmp_path, cores=None, nice=7)
    assert result.status == "built", result.message
    nice, ppid, visible = seen.read_text().split()
    assert int(nice) == max(7, os.nice(0)) and int(ppid) == server.proc.pid and visible == "''"
    assert server.summary()["forks"] == 1


def test_a_forked_build_past_its_time_limit_is_killed(server, tmp_path):
    from harness.judge.builds import run_build, snapshot_candidate

    path = tmp_path / "slow.py"
    path.write_text("import time\ntime.sleep(3600)\n")
    cand = snapshot_candidate(path, "slow", tmp_path / "src")
    result = run_build(cand, repo_root=REPO, cache_dir=tmp_path / "cache", env={}, timeout_s=3,
                       log_path=tmp_path / "build.log", scratch=tmp_path, cores=None)
    assert result.status == "timeout" and server.summary()["forks"] == 1


THREADED = probe_problem("torch.set_num_threads(2)\na = torch.randn(1500, 1500)\nCHECK = float((a @ a).sum())\n")


def test_a_forked_worker_runs_cpu_work_on_several_threads(server, tmp_path):
    """torch's CPU thread pool works in a fork (the server itself ran no parallel work)."""
    w = _handle(tmp_path)
    try:
        assert w.forked
        reply = init_worker(w, tmp_path, THREADED, timeout=60)
        assert reply["ok"], reply
    finally:
        w.kill()


def test_a_server_that_fails_to_start_leaves_workers_to_start_afresh(tmp_path):
    from harness.judge import forkserver

    # harness is importable neither from PYTHONPATH nor from the cwd (PYTHONSAFEPATH): the server's start fails
    env = dict(forkserver.worker_env(REPO), PYTHONPATH=str(tmp_path / "nowhere"), PYTHONSAFEPATH="1")
    server = forkserver.ForkServer(env)
    try:
        r, w = os.pipe()
        try:
            assert server.fork(dict(server.env), tmp_path, w, r) is None
        finally:
            os.close(r)
            os.close(w)
        assert server.summary()["status"] == "failed" and server.summary()["declined"] == 1
        assert server.proc.poll() is not None
    finally:
        server.close()


def test_two_threads_waiting_on_one_forked_worker_both_see_its_end(server, tmp_path):
    """A spare's start and the pool that stops it can wait on the same worker at once."""
    import threading

    w = _handle(tmp_path, trusted=False)
    assert w.forked and w.request("ping", 60).get("ok")
    codes, errors = [], []

    def wait():
        try:
            codes.append(w.proc.wait(timeout=60))
        except BaseException as e:  # noqa: BLE001 - any error in a waiter fails the test
            errors.append(e)

    threads = [threading.Thread(target=wait) for _ in range(3)]
    for t in threads:
        t.start()
    os.kill(w.proc.pid, signal.SIGTERM)
    for t in threads:
        t.join(90)
    assert errors == [] and codes == [-signal.SIGTERM] * 3
    w.kill()


def test_workers_end_with_their_judge_even_when_stopped(tmp_path):
    """A judge killed outright (a lost cluster node's actor, kill -9) leaves no worker behind: the server, whose
    socket to the judge closes, kills every worker it forked, one frozen by SIGSTOP too."""
    import sys
    import time

    script = (
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from harness.judge import forkserver\n"
        "from harness.judge.processes import WorkerHandle\n"
        f"repo, tmp = Path({str(REPO)!r}), Path({str(tmp_path)!r})\n"
        "forkserver.start(repo)\n"
        "ws = [WorkerHandle(repo_root=repo, env={}, log_path=tmp / f'w{i}.log', cwd=tmp, trusted=True) for i in (0, 1)]\n"
        "assert all(w.forked and w.request('ping', 120).get('ok') for w in ws)\n"
        "os.killpg(ws[0].proc.pid, signal.SIGSTOP)\n"
        "print(*[w.proc.pid for w in ws], flush=True)\n"
        "time.sleep(600)\n")
    judge = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(x) for x in judge.stdout.readline().split()]
        assert len(pids) == 2 and all(_running(p) for p in pids)
    finally:
        judge.kill()
        judge.wait()
    deadline = time.monotonic() + 30
    while any(_running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(p) for p in pids)


def _running(pid: int) -> bool:
    try:
        return _stat(pid)[0] not in ("Z", "X")
    except OSError:
        return False

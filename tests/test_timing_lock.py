"""Lanes that share a device take turns on timed commands; other commands overlap; spares start in windows."""

import os
import signal
import threading
import time

import pytest

from harness.judge.turns import DeviceTurn
from harness.settings import LoopSettings


class SlowWorker:
    active = 0
    peak = 0
    guard = threading.Lock()

    def request(self, cmd, timeout, **args):
        with SlowWorker.guard:
            SlowWorker.active += 1
            SlowWorker.peak = max(SlowWorker.peak, SlowWorker.active)
        time.sleep(0.05)
        with SlowWorker.guard:
            SlowWorker.active -= 1
        return {"ok": True}


def peak_concurrency(cmd: str, shared: bool) -> int:
    """Three lanes each send one command to their own worker, inside their device's turn for that command."""
    SlowWorker.peak = 0
    one = DeviceTurn()
    turns = [one if shared else DeviceTurn() for _ in range(3)]

    def lane(turn):
        with turn.around(cmd):
            SlowWorker().request(cmd, 5.0)

    threads = [threading.Thread(target=lane, args=(t,)) for t in turns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return SlowWorker.peak


def test_timed_commands_on_one_device_run_one_at_a_time():
    assert peak_concurrency("time", shared=True) == 1
    assert peak_concurrency("graph", shared=True) == 1


def test_untimed_commands_and_separate_devices_overlap():
    assert peak_concurrency("check", shared=True) == 3
    assert peak_concurrency("time", shared=False) == 3


def process_state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_a_turn_that_shares_cores_with_builds_pauses_them(tmp_path):
    """A build running beside a timed command on shared cores is stopped for the command, and runs on after it."""
    from concurrent.futures import ThreadPoolExecutor

    from conftest import REPO
    from harness.judge.builds import run_build, snapshot_candidate

    pid_file = tmp_path / "pid"
    src = tmp_path / "busy.py"
    src.write_text(f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(3600)\n")
    cand = snapshot_candidate(src, "busy", tmp_path / "src")
    pool = ThreadPoolExecutor(1)
    fut = pool.submit(run_build, cand, repo_root=REPO, cache_dir=tmp_path / "cache", env={}, timeout_s=60,
                      log_path=tmp_path / "build.log", scratch=tmp_path, cores=None)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    try:
        with DeviceTurn(pause_builds=True)():
            time.sleep(0.1)
            assert process_state(pid) == "T"
        time.sleep(0.1)
        assert process_state(pid) in "RS"
        with DeviceTurn(pause_builds=False)():
            time.sleep(0.1)
            assert process_state(pid) in "RS"
    finally:
        os.kill(pid, signal.SIGKILL)
        assert fut.result(timeout=60).status in ("deferred", "timeout")
        pool.shutdown()


def test_spare_pool_keeps_several_workers_ready_and_starts_them_in_parallel():
    from harness.judge.lanes import SparePool

    class Fake:
        closed = 0

        def stop(self):
            pass

        def kill(self):
            Fake.closed += 1

    starts: list[float] = []

    def make(register):
        starts.append(time.monotonic())
        time.sleep(0.2)
        return Fake()

    pool = SparePool(make, size=3)
    t0 = time.monotonic()
    pool.prime()
    first = pool.take(5)
    assert isinstance(first, Fake) and len(starts) == 4  # three primed at once, a fourth started on take
    assert max(starts[:3]) - t0 < 0.1  # in parallel, not one after another
    pool.take(5)
    pool.take(5)
    assert time.monotonic() - t0 < 0.35  # the second and third were ready: no second wait of 0.2 s
    pool.close()
    assert Fake.closed == 3 and len(starts) == 6


def test_spare_pool_hands_out_a_ready_spare_before_an_older_one_still_starting():
    """A spare can wait long for the device's turn; one started after it and ready is handed out first."""
    import threading

    from harness.judge.lanes import SparePool

    release = threading.Event()
    made = iter(range(100))

    def make(register):
        k = next(made)
        if k == 0:
            release.wait(5)
        return k

    pool = SparePool(make, size=2)
    pool.prime()
    time.sleep(0.1)
    t0 = time.monotonic()
    assert pool.take(5) == 1  # spare 0 is still waiting
    time.sleep(0.1)
    assert pool.take(5) == 2  # started on the first take, ready, and spare 0 still waiting
    assert time.monotonic() - t0 < 0.5
    release.set()
    time.sleep(0.1)
    assert pool.take(5) == 0  # ready now, and the oldest of those ready


def test_spare_pool_close_kills_spares_at_once_even_while_they_start():
    """Closing a lane's pool must not wait for a spare's start-up (torch's import, a CUDA context: seconds)."""
    import threading

    from harness.judge.lanes import SparePool

    class Handle:
        def __init__(self):
            self.stopped = threading.Event()
            self.killed = False

        def stop(self):
            self.stopped.set()

        def kill(self):
            self.killed = True

    handles: list[Handle] = []

    def make(register):
        h = Handle()
        handles.append(h)
        register(h)
        if len(handles) == 1:
            return h  # ready at once
        return None if h.stopped.wait(10) else h  # a start-up of 10 s, unless killed

    pool = SparePool(make, size=3)
    pool.prime()
    time.sleep(0.1)
    t0 = time.monotonic()
    pool.close()
    assert time.monotonic() - t0 < 2.0
    assert len(handles) == 3 and all(h.stopped.is_set() for h in handles)
    assert handles[0].killed and not any(h.killed for h in handles[1:])


def _state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_a_frozen_worker_is_stopped_and_answers_again_after(tmp_path):
    """The candidate's processes are stopped while the reference is timed beside it (evaluate._timed_rounds)."""
    from conftest import REPO
    from harness.judge.processes import WorkerHandle

    w = WorkerHandle(repo_root=REPO, env={}, log_path=tmp_path / "w.log", cwd=tmp_path, trusted=False)
    try:
        assert w.request("ping", 120.0).get("ok")
        with w.frozen():
            assert _state(w.proc.pid) == "T"
            assert not w.conn.poll(0.0)
        assert _state(w.proc.pid) != "T"
        assert w.request("ping", 60.0).get("ok")
    finally:
        w.kill()


def test_workers_hash_strings_with_one_fixed_seed_whatever_the_caller_asks(tmp_path):
    """A random hash seed per process gave some worker processes a lasting offset in host-bound times."""
    from conftest import REPO
    from harness.judge.processes import WorkerHandle

    ws = [WorkerHandle(repo_root=REPO, env={"PYTHONHASHSEED": "random"}, log_path=tmp_path / f"w{i}.log",
                       cwd=tmp_path, trusted=False) for i in range(2)]
    try:
        for w in ws:
            assert w.request("ping", 120.0).get("ok")
            env = dict(kv.split("=", 1) for kv in open(f"/proc/{w.proc.pid}/environ").read().split("\0") if "=" in kv)
            assert env["PYTHONHASHSEED"] == "0"
    finally:
        for w in ws:
            w.kill()


def test_spares_take_the_turn_only_while_the_lane_opens_it():
    turn = DeviceTurn()
    got = threading.Event()

    def spare():
        with turn.for_spare():
            got.set()

    turn.open_to_spares(False)
    t = threading.Thread(target=spare, daemon=True)
    t.start()
    assert not got.wait(0.2)  # the lane's timed calls are under way: the spare waits though the lock is free
    with turn():
        turn.open_to_spares(True)
        assert not got.wait(0.1)  # an open window still waits for the lane's current timed command
    assert got.wait(2.0)
    t.join(2.0)


def test_reference_compiles_untimed_with_spares_let_in_then_times_in_the_turn():
    """The compile's first calls run outside the device's turn, with the spares' window open; every timed command
    runs in the turn with the window closed; one compiled setup serves both the eager and the compiled timing."""
    from types import SimpleNamespace

    from harness.judge.reference import ReferenceRunner
    from harness.settings import Shape

    turn = DeviceTurn()
    turn.open_to_spares(False)
    seen = []

    class Recorder:
        def request(self, cmd, timeout, **args):
            seen.append((cmd, args, turn.window.is_set(), turn.lock.locked()))
            return {"ok": True, "device_us": [10.0, 11.0, 12.0], "host_us": [15.0] * 3, "span_us": [12.0] * 3,
                    "graph_ok": False}

    timing = SimpleNamespace(compile_reference=True, graph=True, speedup_metric="time_us")
    plan = SimpleNamespace(config=SimpleNamespace(timing=timing, check=SimpleNamespace(precision="as_written")),
                           time_seed=lambda name: 1, init_seed=lambda name: 2, graph_seed=lambda name: 3,
                           baseline_for=lambda shape: None,
                           loop=LoopSettings(warmup_ms=1.0, min_runs=2, max_runs=4, budget_s=0.1))
    t = ReferenceRunner(Recorder(), plan, 5.0, turn=turn).timings(Shape("s", {}), "cuda", min_bytes=64)
    assert t.eager and t.compiled and t.floor_launch and t.floor_read and t.floor_copy and t.compile_error is None
    assert [c for c, args, _, _ in seen if c == "setup"] == ["setup"]
    warm = [(window, locked) for c, _, window, locked in seen if c == "warm"]
    assert warm == [(True, False)]  # the compile: window open, turn free
    timed = [(args, window, locked) for c, args, window, locked in seen if c == "time"]
    assert len(timed) == 5 and all(window is False and locked for _, window, locked in timed)
    assert sum(bool(args.get("compiled")) for args, _, _ in timed) == 1
    assert not turn.window.is_set()


class IdleSpare:
    def stop(self):
        pass

    def kill(self):
        pass


def test_spare_pool_starts_no_spare_beyond_the_candidates_left():
    from harness.judge.lanes import SparePool

    made = []
    pool = SparePool(lambda register: made.append(1) or IdleSpare(), size=7, needed=2)
    pool.prime()
    assert len(made) == 2
    pool.take(5)
    pool.take(5)
    assert len(made) == 2 and not pool.slots  # both candidates served: none started for no one
    assert pool.take(5) is not None and len(made) == 3  # a discarded worker's candidate still gets one
    pool.close()


def test_a_lane_waiting_for_a_spare_lets_it_through_a_closed_window_and_gives_up_in_time():
    """After timing closes the window, a step that needs a new worker (the GPU's failed capture, its kernel
    probe) must still get one: waiting for a spare opens the window, then leaves it as it was. A spare that
    never comes is a TimeoutError, not a hang, and stays in the pool."""
    import threading

    from harness.judge.lanes import SparePool

    turn = DeviceTurn()
    turn.open_to_spares(False)
    never = threading.Event()
    made = iter(range(100))

    def make(register):
        k = next(made)
        with turn.for_spare(device_step=False):
            if k >= 1:
                never.wait(10)
        return k

    pool = SparePool(make, size=1)
    pool.prime()
    time.sleep(0.1)
    with turn.spares_in(restore=True):
        assert pool.take(5) == 0
    assert not turn.window.is_set()
    with turn.spares_in(restore=True), pytest.raises(TimeoutError):
        pool.take(0.3)
    never.set()
    assert pool.take(5) == 1

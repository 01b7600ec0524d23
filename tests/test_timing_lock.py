"""Lanes that share a device take turns on timed commands; other commands overlap."""

import threading
import time

from harness.reference import DeviceTurn, ReferenceRunner


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
    SlowWorker.peak = 0
    turn = DeviceTurn()
    runners = [ReferenceRunner(SlowWorker(), None, {}, 5.0, turn=turn if shared else None) for _ in range(3)]
    threads = [threading.Thread(target=r._ask, args=(cmd,)) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return SlowWorker.peak


def test_timed_commands_on_one_device_run_one_at_a_time():
    assert peak_concurrency("time", shared=True) == 1
    assert peak_concurrency("calibrate", shared=True) == 1


def test_untimed_commands_and_separate_devices_overlap():
    assert peak_concurrency("check", shared=True) == 3
    assert peak_concurrency("time", shared=False) == 3


def process_state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def test_a_turn_that_shares_cores_with_builds_pauses_them():
    import subprocess
    import sys

    from harness import build

    proc = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.01)"], start_new_session=True)
    try:
        with build._RUNNING_LOCK:
            build._RUNNING[proc.pid] = "some_build"
        with DeviceTurn(pause_builds=True)():
            time.sleep(0.1)
            assert process_state(proc.pid) == "T"
        time.sleep(0.1)
        assert process_state(proc.pid) in "RS"
        with DeviceTurn(pause_builds=False)():
            time.sleep(0.1)
            assert process_state(proc.pid) in "RS"
    finally:
        with build._RUNNING_LOCK:
            build._RUNNING.pop(proc.pid, None)
        proc.kill()
        proc.wait()


def test_spare_pool_keeps_several_workers_ready_and_starts_them_in_parallel():
    from harness.evaluate import SparePool

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
    first = pool.take()
    assert isinstance(first, Fake) and len(starts) == 4  # three primed at once, a fourth started on take
    assert max(starts[:3]) - t0 < 0.1  # in parallel, not one after another
    pool.take()
    pool.take()
    assert time.monotonic() - t0 < 0.35  # the second and third were ready: no second wait of 0.2 s
    pool.close()
    assert Fake.closed == 3 and len(starts) == 6


def test_spare_pool_hands_out_a_ready_spare_before_an_older_one_still_starting():
    """A spare can wait long for the device's turn; one started after it and ready is handed out first."""
    import threading

    from harness.evaluate import SparePool

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
    assert pool.take() == 1  # spare 0 is still waiting
    time.sleep(0.1)
    assert pool.take() == 2  # started on the first take, ready, and spare 0 still waiting
    assert time.monotonic() - t0 < 0.5
    release.set()
    time.sleep(0.1)
    assert pool.take() == 0  # ready now, and the oldest of those ready


def test_spare_pool_close_kills_spares_at_once_even_while_they_start():
    """Closing a lane's pool must not wait for a spare's start-up (torch's import, a CUDA context: seconds)."""
    import threading

    from harness.evaluate import SparePool

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
    from harness.workers import WorkerHandle

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
    from harness.workers import WorkerHandle

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


def test_reference_compiles_untimed_with_spares_let_in_then_times_eager_and_compiled_back_to_back():
    """The compile's first calls run outside the device's turn, with the spares' window open; every timed command
    runs in the turn with the window closed, and the compiled setup serves the eager timing (no second setup)."""
    from types import SimpleNamespace

    from harness.config import Shape

    turn = DeviceTurn()
    turn.open_to_spares(False)
    seen = []

    class Recorder:
        def request(self, cmd, timeout, **args):
            seen.append((cmd, args.get("compiled", args.get("compile_model")), args.get("floor"),
                         turn.window.is_set(), turn.lock.locked()))
            return {"ok": True, "device_us": [10.0, 11.0, 12.0], "graph_ok": False}

    timing = SimpleNamespace(compile_reference=True, graph=True, speedup_metric="time_us")
    plan = SimpleNamespace(config=SimpleNamespace(timing=timing), time_seed=lambda name: 1, init_seed=lambda name: 2,
                           graph_seed=lambda name: 3)
    loop = {"warmup_ms": 1.0, "min_runs": 2, "max_runs": 4, "budget_s": 0.1, "target_rse": 0.01, "quantile": 0.1}
    ref = ReferenceRunner(Recorder(), plan, loop, 5.0, turn=turn)
    t = ref.timings(Shape("s", {}), "cuda", min_bytes=64)
    assert [c[:3] for c in seen] == [("setup", True, None), ("warm", True, None), ("time", None, None),
                                     ("time", True, None), ("time", None, "launch"), ("time", None, "launch_read"),
                                     ("time", None, "copy")]
    assert seen[1][3:] == (True, False)  # the compile: window open, turn free
    assert all(window is False and locked for cmd, _, _, window, locked in seen if cmd == "time")
    assert not turn.window.is_set()
    assert t.eager and t.compiled and t.floor_copy and t.compile_error is None
    assert set(ref.spent) >= {"compile", "eager", "compiled", "floors"}


class IdleSpare:
    def stop(self):
        pass

    def kill(self):
        pass


def test_spare_pool_primed_to_a_limit_first_then_to_its_size():
    """At the run's start only the early share of spares start (each more torch import slows the reference's)."""
    from harness.evaluate import SparePool

    made = []
    pool = SparePool(lambda register: made.append(1) or IdleSpare(), size=7)
    pool.prime(5)
    assert len(pool.slots) == 5
    pool.prime()
    assert len(pool.slots) == 7
    pool.close()
    assert len(made) == 7


def test_spare_pool_starts_no_spare_beyond_the_candidates_left():
    from harness.evaluate import SparePool

    made = []
    pool = SparePool(lambda register: made.append(1) or IdleSpare(), size=7, needed=2)
    pool.prime()
    assert len(made) == 2
    pool.take()
    pool.take()
    assert len(made) == 2 and not pool.slots  # both candidates served: none started for no one
    assert pool.take() is not None and len(made) == 3  # a discarded worker's candidate still gets one
    pool.close()

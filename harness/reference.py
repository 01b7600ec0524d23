"""The reference side of a run, in the judge: outputs, timings and calibration from a reference worker.

Reference outputs for every check seed are produced once per run, travel over the worker's private
socket and stay in the judge's memory; no candidate process ever holds them. Each lane (device) times
the reference itself, eager and under torch.compile, the way candidates are timed.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .build import builds_frozen
from .check import tensor_from_bytes
from .config import Shape
from .stats import Measurement, Round, summarize
from .verdict import Calibration
from .workers import WorkerGone, WorkerHandle

INIT_TIMEOUT_S = 600.0


@dataclass
class RefShape:
    shape: Shape
    outputs: dict[int, list[tuple[dict, torch.Tensor]]] = field(default_factory=dict)
    input_fps: dict[int, list[int]] = field(default_factory=dict)
    in_bytes: int = 0
    out_bytes: int = 0
    error: str | None = None

    @property
    def min_bytes(self) -> int:
        return self.in_bytes + self.out_bytes

    def out_dtypes(self) -> list[str]:
        first = next(iter(self.outputs.values()), [])
        return [m["dtype"] for m, _ in first]


@dataclass
class RefTiming:
    eager: Measurement | None = None
    compiled: Measurement | None = None
    graph: Measurement | None = None
    floor_launch: Measurement | None = None
    floor_read: Measurement | None = None
    floor_copy: Measurement | None = None
    compile_error: str | None = None
    error: str | None = None
    seconds: float = 0.0


class ReferenceStore:
    """Reference outputs shared by every lane: computed by the first lane, awaited by the others."""

    def __init__(self):
        self.shapes: dict[str, RefShape] = {}
        self.ready: dict[str, threading.Event] = {}
        self.fps: dict[tuple[str, int, bool], list] = {}
        self.lock = threading.Lock()

    def event(self, name: str) -> threading.Event:
        with self.lock:
            return self.ready.setdefault(name, threading.Event())

    def put(self, ref: RefShape) -> None:
        self.shapes[ref.shape.name] = ref
        self.event(ref.shape.name).set()

    def get(self, name: str) -> RefShape:
        self.event(name).wait()
        return self.shapes[name]


TIMED_COMMANDS = frozenset({"time", "graph", "calibrate"})


class DeviceTurn:
    """Held around every timed command on one device. Lanes that share the device take turns (a reference
    timed beside a candidate on one GPU would slow both); where timing shares its cores with builds (CPU
    runs, small hosts), running builds are paused (SIGSTOP) meanwhile."""

    def __init__(self, pause_builds: bool = False):
        self.lock = threading.Lock()
        self.pause_builds = pause_builds
        self.window = threading.Event()
        self.window.set()

    @contextlib.contextmanager
    def __call__(self):
        with self.lock, (builds_frozen() if self.pause_builds else contextlib.nullcontext()):
            yield

    def open_to_spares(self, is_open: bool) -> None:
        """Spares start their device in the turn (a CUDA context and the poisoned block: 0.22-0.29 s on the
        H200, twelfth session), and only while a lane has untimed work ahead (a record's start and checks). A
        spare let in between two timed commands would hold the lane's next one for all of it; let in there,
        it overlaps the candidate's import and checks."""
        (self.window.set if is_open else self.window.clear)()

    @contextlib.contextmanager
    def for_spare(self):
        self.window.wait()
        with self():
            yield

    @contextlib.contextmanager
    def spares_in(self):
        """Open the window to spares for an untimed stretch of the reference's work (its outputs, torch.compile),
        closed again after: their device steps then fall there instead of between its timed commands, where
        they held it 1.1 s of 5.9 at seed (seventeenth session)."""
        self.open_to_spares(True)
        try:
            yield
        finally:
            self.open_to_spares(False)

    def around(self, cmd: str):
        """The turn for a timed worker command; nothing for the others."""
        return self() if cmd in TIMED_COMMANDS else contextlib.nullcontext()


class ReferenceRunner:
    """Drives one lane's reference worker; timed commands take the device's turn."""

    def __init__(self, worker: WorkerHandle, plan, loop: dict, timeout_s: float, turn: DeviceTurn | None = None):
        self.worker = worker
        self.plan = plan
        self.loop = loop
        self.timeout_s = timeout_s
        self.current: tuple[str, bool] | None = None
        self.lock = threading.Lock()
        self.turn = turn or DeviceTurn()
        self.stage = "other"
        self.spent: dict[str, float] = {}

    @contextlib.contextmanager
    def staged(self, name: str):
        """Count the commands sent inside under `name` in `spent` (run.json `reference_seconds`): wall seconds,
        and the worker's own share of them, for where a run's reference work goes."""
        before, self.stage = self.stage, name
        try:
            yield
        finally:
            self.stage = before

    def _ask(self, cmd: str, timeout: float | None = None, **args) -> dict:
        t0 = time.monotonic()
        with self.turn.around(cmd):
            reply = self.worker.request(cmd, timeout or self.timeout_s, **args)
        stage = self.stage
        self.spent[stage] = round(self.spent.get(stage, 0.0) + time.monotonic() - t0, 4)
        self.spent[f"{stage}, in worker"] = round(self.spent.get(f"{stage}, in worker", 0.0) + reply.get("worker_s", 0.0), 4)
        if not reply.get("ok"):
            raise RuntimeError(reply.get("message", f"reference {cmd} failed"))
        return reply

    def init(self, problem_src: dict, device: str, cache_dir: str, cores: list[int] | None,
             env: dict | None = None) -> dict:
        with self.staged("init"):
            return self._ask("init", INIT_TIMEOUT_S, role="reference", device=device, problem_src=problem_src,
                             fp_seed=self.plan.fp_seed, cache_dir=cache_dir, cores=cores, env=env)

    def calibrate(self, cache_bytes: int) -> Calibration:
        cal_loop = dict(self.loop, min_runs=max(50, self.loop["min_runs"]), target_rse=0.01, quantile=0.5)
        with self.staged("calibrate"):
            r = self._ask("calibrate", loop=cal_loop)
        return Calibration(empty_launch_us=r["empty_launch_us"], read_us=r["read_us"], copy_gbps=r["copy_gbps"],
                           host_gap_us=r["host_gap_us"], cache_bytes=cache_bytes, copy_bytes=r["copy_bytes"])

    def _setup(self, shape: Shape, compiled: bool) -> None:
        """A compiled setup holds the eager model too, so it serves both (a new setup would compile again)."""
        if self.current not in ((shape.name, compiled), (shape.name, True)):
            self._ask("setup", params=dict(shape.params), init_seed=self.plan.init_seed(shape.name),
                      compile_model=compiled)
            self.current = (shape.name, compiled)

    def outputs(self, shape: Shape) -> RefShape:
        ref = RefShape(shape)
        try:
            with self.lock, self.staged("outputs"), self.turn.spares_in():
                self._setup(shape, False)
                seeds = self.plan.check_seeds(shape.name) + [self.plan.post_seed(shape.name)]
                for seed in seeds:
                    r = self._ask("check", seed=seed)
                    outs = [(m, tensor_from_bytes(self.worker.recv_frame(m["nbytes"], self.timeout_s), m))
                            for m in r["outputs"]]
                    ref.outputs[seed] = outs
                    ref.input_fps[seed] = r["input_fps"]
                    ref.in_bytes = r["input_bytes"]
                sizes = [sum(m["nbytes"] for m, _ in outs) for outs in ref.outputs.values()]
                ref.out_bytes = int(statistics.mean(sizes))
        except (RuntimeError, WorkerGone) as e:
            ref.error = str(e)
        return ref

    def timings(self, shape: Shape, device: str, min_bytes: int = 0) -> RefTiming:
        """torch.compile's first calls (untimed, spares let in meanwhile), eager and compiled back to back, the
        floors, then (only when speedups use it) CUDA-graph replay, which is last because a failed capture
        can leave the worker's CUDA state unusable. The floors time a
        stand-in through the candidates' own loop on this shape's inputs (refills, flush and verification
        included): one launch; one read and one launch; a copy of the shape's minimum bytes. What the
        cheapest possible candidate, and a copy of the same bytes, measure under the same conditions."""
        t = RefTiming()
        t0 = time.monotonic()
        try:
            return self._timings(t, shape, device, min_bytes)
        finally:
            t.seconds = round(time.monotonic() - t0, 3)

    def _timings(self, t: RefTiming, shape: Shape, device: str, min_bytes: int) -> RefTiming:
        base = self.plan.time_seed(shape.name)
        settings = self.plan.config.timing
        loop = one_off_loop(self.loop)
        compiled = settings.compile_reference
        if compiled:
            try:
                with self.lock, self.staged("compile"), self.turn.spares_in():
                    self._setup(shape, True)
                    self._ask("warm", timeout=max(self.timeout_s, 900.0), base_seed=base, calls=3, compiled=True)
            except (RuntimeError, WorkerGone) as e:
                t.compile_error = str(e)[:500]
                compiled = False
        try:
            with self.lock, self.staged("eager"):
                self._setup(shape, False)
                t.eager = summarize(self._ask("time", base_seed=base, loop=loop, verify=False)["device_us"])
        except (RuntimeError, WorkerGone) as e:
            t.error = str(e)
            return t
        if compiled:
            try:
                with self.lock, self.staged("compiled"):
                    r = self._ask("time", base_seed=base, loop=loop, verify=False, compiled=True)
                    t.compiled = summarize(r["device_us"])
            except (RuntimeError, WorkerGone) as e:
                t.compile_error = str(e)[:500]
        try:
            with self.lock, self.staged("floors"):
                self._setup(shape, False)
                t.floor_launch, t.floor_read, t.floor_copy = (
                    summarize(self._ask("time", base_seed=base, loop=one_off_loop(short_loop(self.loop)), verify=True,
                                        floor=kind, floor_bytes=min_bytes)["device_us"])
                    for kind in ("launch", "launch_read", "copy"))
        except (RuntimeError, WorkerGone) as e:
            t.error = str(e)
            return t
        if device == "cuda" and settings.graph and settings.speedup_metric == "gpu_time_us":
            try:
                with self.lock, self.staged("graph"):
                    self._setup(shape, False)
                    g = self._ask("graph", base_seed=self.plan.graph_seed(shape.name), loop=short_loop(self.loop))
                    t.graph = summarize(g["device_us"]) if g.get("graph_ok") else None
            except (RuntimeError, WorkerGone) as e:
                t.error = f"graph: {e}"
        return t

    def time_round(self, shape: Shape, base_seed: int, loop: dict, min_bytes: int) -> Round:
        """Short timings of the eager reference, an empty launch and the copy floor, for a round paired with a
        candidate's (stats.pooled_ratio). The candidate's calls go in later."""
        with self.lock, self.staged("rounds"):
            self._setup(shape, False)
            eager = self._ask("time", base_seed=base_seed, loop=loop, verify=False)["device_us"]
            launch = self._ask("time", base_seed=base_seed, loop=phase_loop(loop), verify=True,
                               floor="launch")["device_us"]
            copy = self._ask("time", base_seed=base_seed, loop=loop, verify=True, floor="copy",
                             floor_bytes=min_bytes)["device_us"] if min_bytes else []
        return Round(reference=tuple(eager), candidate=(), copy=tuple(copy), launch=tuple(launch))

    def fingerprints(self, store: ReferenceStore, shape: Shape, seeds: list[int], projection: bool) -> dict[int, list]:
        missing = [s for s in dict.fromkeys(seeds) if (shape.name, s, projection) not in store.fps]
        if missing:
            with self.lock, self.staged("fingerprints"):
                self._setup(shape, False)
                tols = {k: [t.atol, t.rtol] for k, t in self.plan.config.check.tolerance.items()}
                r = self._ask("fingerprints", seeds=missing, projection=projection, tolerances=tols)
            for s, fp in zip(missing, r["fingerprints"]):
                store.fps[(shape.name, s, projection)] = fp
        return {s: store.fps[(shape.name, s, projection)] for s in seeds}


def one_off_loop(loop: dict) -> dict:
    """The reference's timings once per shape (eager and compiled back to back, then the floors at a shorter
    loop): half the candidate's budget. Speedups against eager come from the rounds, which time the reference
    beside every candidate; these give the compiled-over-eager ratio a speedup against torch.compile is
    chained through, and the figures a record falls back on when it has no rounds."""
    return dict(loop, budget_s=loop["budget_s"] / 2)


def short_loop(loop: dict) -> dict:
    """A shorter timing loop (fewer runs, a smaller budget): for CUDA-graph replays, whose launch gaps are
    gone, and for the floors' stand-ins."""
    return dict(loop, min_runs=min(loop["min_runs"], 10), budget_s=min(loop["budget_s"], 0.5))


def phase_loop(loop: dict) -> dict:
    """The empty launch that says which phase the host is in during a round: a few milliseconds."""
    return dict(loop, warmup_ms=min(loop["warmup_ms"], 2.0), min_runs=10, max_runs=40, budget_s=0.01)


def log_path(log_dir: Path, lane: int) -> Path:
    return log_dir / f"reference.lane{lane}.log"

"""The reference side of a run, in the judge: outputs, timings and floors from a reference worker, which runs no
candidate code. Outputs for every check seed are produced once per run, travel over the worker's private socket
and stay in the judge's memory; no candidate process ever holds them. Each lane (device) times the reference
itself, eager and under torch.compile, the way candidates are timed."""

import statistics
import threading
import time
from dataclasses import dataclass, field, replace

import torch

from ..settings import LoopSettings, Shape
from ..stats import Measurement, Round, summarize
from .baseline import measurement, scaled
from .compare import tensor_from_bytes
from .processes import WorkerGone, WorkerHandle, judge_timed
from .turns import DeviceTurn

INIT_TIMEOUT_S = 600.0


@dataclass
class RefShape:
    shape: Shape
    outputs: dict[int, list[tuple[dict, torch.Tensor]]] = field(default_factory=dict)
    input_fps: dict[int, list[int]] = field(default_factory=dict)
    min_bytes: int = 0  # one call's inputs and outputs
    error: str | None = None


@dataclass
class RefTiming:
    eager: Measurement | None = None
    compiled: Measurement | None = None
    graph: Measurement | None = None
    floor_launch: Measurement | None = None
    floor_read: Measurement | None = None
    floor_copy: Measurement | None = None
    empty_gap_us: float | None = None  # the host's wait past the last event of an empty call (floor_launch's)
    flush_us: float = 0.0  # the L2 flush's length before an empty call queued behind it (launch_behind_flush)
    cover_us: float = 0.0  # how long the device is held before each call's events start (LoopSettings.cover_us)
    compile_error: str | None = None
    compiled_from: str = "timed"  # or "baseline": the baseline's compiled/eager ratio times this eager
    error: str | None = None
    seconds: float = 0.0


class ReferenceStore:
    """Reference outputs shared by every lane: computed by the first lane, awaited by the others."""

    def __init__(self):
        self.shapes: dict[str, RefShape] = {}
        self.ready: dict[str, threading.Event] = {}
        self.fps: dict[tuple[str, int, bool], list] = {}

    def put(self, ref: RefShape) -> None:
        self.shapes[ref.shape.name] = ref
        self.ready.setdefault(ref.shape.name, threading.Event()).set()  # dict.setdefault is atomic

    def get(self, name: str) -> RefShape:
        self.ready.setdefault(name, threading.Event()).wait()
        return self.shapes[name]


class ReferenceRunner:
    """Drives one lane's reference worker, from that lane's thread only; timed commands take the device's turn."""

    def __init__(self, worker: WorkerHandle, plan, timeout_s: float, turn: DeviceTurn | None = None):
        self.worker = worker
        self.plan = plan
        self.timeout_s = timeout_s
        self.current: tuple[str, bool] | None = None
        self.turn = turn or DeviceTurn()

    def _ask(self, cmd: str, timeout: float | None = None, **args) -> dict:
        with self.turn.around(cmd):
            reply = self.worker.request(cmd, timeout or self.timeout_s, **args)
        if not reply.get("ok"):
            raise RuntimeError(reply.get("message", f"reference {cmd} failed"))
        return reply

    def init(self, problem_src: dict, cores: list[int] | None, env: dict | None = None) -> dict:
        return self._ask("init", INIT_TIMEOUT_S, role="reference", device=self.plan.device, problem_src=problem_src,
                         fp_seed=self.plan.fp_seed, cache_dir=str(self.plan.cache_dir), cores=cores, env=env,
                         strict=self.plan.strict_sandbox)  # timed as the candidate is: the same guards

    def _setup(self, shape: Shape, compiled: bool) -> None:
        """A compiled setup holds the eager model too, so it serves both (a new setup would compile again)."""
        if self.current not in ((shape.name, compiled), (shape.name, True)):
            self._ask("setup", params=dict(shape.params), init_seed=self.plan.init_seed(shape.name),
                      compile_model=compiled, precision=self.plan.config.check.precision)
            self.current = (shape.name, compiled)

    def outputs(self, shape: Shape) -> RefShape:
        ref = RefShape(shape)
        try:
            with self.turn.spares_in():
                self._setup(shape, False)
                for seed in self.plan.check_seeds(shape.name) + [self.plan.post_seed(shape.name)]:
                    r = self._ask("check", seed=seed)
                    ref.outputs[seed] = [(m, tensor_from_bytes(self.worker.recv_frame(m["nbytes"], self.timeout_s), m))
                                         for m in r["outputs"]]
                    ref.input_fps[seed] = r["input_fps"]
                ref.min_bytes = r["input_bytes"] + int(statistics.mean(sum(m["nbytes"] for m, _ in outs)
                                                                       for outs in ref.outputs.values()))
        except (RuntimeError, WorkerGone) as e:
            ref.error = str(e)
        return ref

    def timings(self, shape: Shape, device: str, min_bytes: int = 0) -> RefTiming:
        """torch.compile's first calls (untimed, spares let in meanwhile), eager and compiled back to back, the
        floors, then (only when speedups use it) CUDA-graph replay, last as a failed capture can leave the worker's
        CUDA state unusable. The floors (one launch; one read and one launch; a copy of the shape's minimum bytes)
        time what the cheapest possible candidate costs through the candidates' own loop, verification included."""
        t = RefTiming()
        t0 = time.monotonic()
        base = self.plan.time_seed(shape.name)
        settings = self.plan.config.timing
        known = self.plan.baseline_for(shape)
        compiled = settings.compile_reference and not (known and known.get("compiled") and known.get("eager"))
        if compiled:
            try:
                with self.turn.spares_in():
                    self._setup(shape, True)
                    self._ask("warm", timeout=max(self.timeout_s, 900.0), base_seed=base, calls=3, compiled=True)
            except (RuntimeError, WorkerGone) as e:
                t.compile_error = str(e)[:500]
                compiled = False
        try:
            self._setup(shape, False)
            t.cover_us = self._cover(base, device)
            shaped = replace(self.plan.loop, cover_us=t.cover_us)
            loop = shaped.one_off().json()
            t.eager = summarize(self._ask("time", base_seed=base, loop=loop, verify=False)["device_us"])
            if compiled:
                try:
                    t.compiled = summarize(self._ask("time", base_seed=base, loop=loop, verify=False,
                                                     compiled=True)["device_us"])
                except (RuntimeError, WorkerGone) as e:
                    t.compile_error = str(e)[:500]
            elif settings.compile_reference and known:
                t.compiled = scaled(measurement(known["compiled"]), t.eager.median_us / known["eager"]["median_us"])
                t.compiled_from = "baseline"
            floors = [self._ask("time", base_seed=base, loop=shaped.short().one_off().json(), verify=True,
                                floor=kind, floor_bytes=min_bytes) for kind in ("launch", "launch_read", "copy")]
            t.floor_launch, t.floor_read, t.floor_copy = (summarize(r["device_us"]) for r in floors)
            t.empty_gap_us = statistics.median(h - s for h, s in zip(floors[0]["host_us"], floors[0]["span_us"]))
            t.flush_us = statistics.median(self._flush_lengths(floors[0], device, shaped) or [0.0])
            if device == "cuda" and settings.graph and settings.speedup_metric == "gpu_time_us":
                try:
                    g = self._ask("graph", base_seed=self.plan.graph_seed(shape.name),
                                  loop=self.plan.loop.short().json())
                    t.graph = summarize(g["device_us"]) if g.get("graph_ok") else None
                except (RuntimeError, WorkerGone) as e:
                    t.error = f"graph: {e}"
        except (RuntimeError, WorkerGone) as e:
            t.error = str(e)
        t.seconds = round(time.monotonic() - t0, 3)
        return t

    def _cover(self, base: int, device: str) -> float:
        """The device's hold before a call's events start: `timing.launch_cover` times the reference's launch
        time where that launch fits in the flush, so the launches that plain timing hides stay hidden when the
        host runs slower for a while; no more than the flush where it does not fit (plain timing shows those
        launches, and so does the harness). Candidates are timed with the same hold."""
        loop = self.plan.loop
        if device != "cuda" or not loop.behind_flush:
            return 0.0
        r = self._ask("time", base_seed=base, loop=loop.launch_probe().json(), verify=False)
        launch = statistics.median(r["launch_us"])
        flush = statistics.median(self._flush_lengths(r, device, loop))
        return round(self.plan.config.timing.launch_cover * launch, 1) if launch < flush else 0.0

    @staticmethod
    def _flush_lengths(launch_reply: dict, device: str, loop: LoopSettings) -> list[float]:
        """How long the flush ran before each empty call queued behind it: its span less its device time; none
        where calls are not queued behind the flush (the flush then hides no host work)."""
        if device != "cuda" or not loop.behind_flush:
            return []
        return [s - d for s, d in zip(launch_reply["span_us"], launch_reply["device_us"])]

    def time_round(self, shape: Shape, base_seed: int, loop: LoopSettings, min_bytes: int) -> Round:
        """Short timings of the eager reference, an empty launch and the copy floor, for a round paired with a
        candidate's (stats.pooled_ratio). The candidate's calls go in later."""
        self._setup(shape, False)
        eager = self._ask("time", base_seed=base_seed, loop=loop.json(), verify=False)["device_us"]
        probe = self._ask("time", base_seed=base_seed, loop=loop.launch_probe().json(), verify=True, floor="launch")
        launch = probe["device_us"]
        flush = self._flush_lengths(probe, self.plan.device, loop)
        copy = self._ask("time", base_seed=base_seed, loop=loop.json(), verify=True, floor="copy",
                         floor_bytes=min_bytes)["device_us"] if min_bytes else []
        return Round(reference=tuple(eager), candidate=(), copy=tuple(copy), launch=tuple(launch), flush=tuple(flush))

    def judge_timed(self, shape: Shape, seeds: list[int], projection: bool,
                    pause_builds: bool = False) -> tuple[list, list[float]]:
        """The judge's clock on the reference (processes.judge_timed): its no-ops are the channel's cost that a
        candidate's own no-ops, which it could slow, are never allowed to exceed."""
        self._setup(shape, False)
        with self.turn(pause_builds=pause_builds):
            return judge_timed(self.worker, seeds, projection, self.timeout_s)

    def fingerprints(self, store: ReferenceStore, shape: Shape, seeds: list[int], projection: bool) -> dict[int, list]:
        missing = [s for s in dict.fromkeys(seeds) if (shape.name, s, projection) not in store.fps]
        if missing:
            self._setup(shape, False)
            r = self._ask("fingerprints", seeds=missing, projection=projection,
                          tolerances=self.plan.config.check.tolerances())
            for s, fp in zip(missing, r["fingerprints"]):
                store.fps[(shape.name, s, projection)] = fp
        return {s: store.fps[(shape.name, s, projection)] for s in seeds}

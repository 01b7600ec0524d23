"""Typed, frozen settings with their defaults written once, here: the run's `Config` (harness.judge.config
reads each YAML key by its type and default here) and the `LoopSettings` sent with each timed command."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

STATIC_POLICIES = ("strict", "warn", "off")
SPEEDUP_METRICS = ("time_us", "gpu_time_us")
PRECISIONS = ("as_written", "fp32", "fp16", "bf16")  # KernelBench's `precision`: floating inputs and weights cast
DEVICES = ("cuda", "cpu")
STRICT_SANDBOX = ("cpu", "cuda")
"""Devices whose candidate processes may write only to their own folder, the run's scratch, caches and device
nodes (an allowlist), and read no file of the run's folder, results/, other runs' scratch or other processes'
folders; each has a folder of its own and its stdout and stderr through a pipe (judge/logpump.py), and its timed
calls' draws and output reads run with the candidate's hooks off (worker/watch.hooks_off) and its timed commands
with the collector off (worker/watch.quiet_loop). On a device not named they may write anywhere but the repo,
the run's files and the reference's caches, and read anything."""
CLEAR_STALE_BUILD_LOCK = ("cpu",)
"""Devices whose builds remove torch's own build lock (the file `lock` in an extension's build folder) once they
hold the cache's file lock, under which no other build of that folder runs (worker/extcache.py). A build killed
at its time limit or by Ctrl-C leaves torch's lock behind, and every later build of the same source waits on it
until its own time limit."""
CLEAR_STALE_LOCK_ENV = "KBH_CLEAR_STALE_LOCK"
JUDGE_RECHECK_PAUSES_S = {"cpu": (0.0, 1.0, 4.0), "cuda": (0.0,)}
"""Per device, the pause before each re-measure of a judge's clock that contradicts the reported times, with every
build paused; the lowest measure decides. A host busy with work no build pause reaches (another run, a cluster
node on the same host, a worker importing torch) can hold the judge's round trips up for seconds, so a
contradiction accuses only where it holds in windows seconds apart. A forged report is contradicted in every
window; an honest candidate needs one quiet one."""
LOG_CAP_BYTES = 16 * 2**20
"""The most of a candidate worker's output a log keeps where the output comes through a pipe (the strict sandbox);
the rest is counted and dropped."""
L2_RESET_ON_DEMAND = True
"""The worker's clock sets the persisting-L2 limit to 0 and resets persisting lines at start; True: the limit is
read before every flush, and both are done again only where a call set it; False: the lines are reset again
before every flush, which slows a launch-bound figure ~5% for the rest of the process (worker/clocks.py)."""


@dataclass(frozen=True)
class Tolerance:
    atol: float = 0.0
    rtol: float = 0.0

    @property
    def exact(self) -> bool:
        return self.atol == 0.0 and self.rtol == 0.0


@dataclass(frozen=True)
class Shape:
    name: str
    params: Mapping[str, Any]


DTYPE_TOLERANCE = {"float32": Tolerance(1e-4, 1e-4), "float64": Tolerance(1e-4, 1e-4),
                   "float16": Tolerance(1e-2, 1e-2), "bfloat16": Tolerance(1e-2, 1e-2)}
"""Per output dtype where the config sets neither that dtype nor `default`: KernelBench's values (from
torchbench's); every other dtype (integers, bool, float8) exact."""


@dataclass(frozen=True)
class CheckSettings:
    seeds: int = 5
    tolerance: Mapping[str, Tolerance] = field(default_factory=dict)  # by dtype name, or "default"
    verify_timed: int = 16
    precision: str = "as_written"  # or a dtype every floating input and the models' weights are cast to

    def tolerance_for(self, dtype: str) -> Tolerance:
        """The config's for this dtype, else its `default`, else DTYPE_TOLERANCE's, else exact."""
        if dtype in self.tolerance:
            return self.tolerance[dtype]
        return self.tolerance.get("default", DTYPE_TOLERANCE.get(dtype, Tolerance()))

    def tolerances(self) -> dict[str, list[float]]:
        """Every dtype's tolerance, resolved, with `default` for the rest (what a worker is sent)."""
        names = {*DTYPE_TOLERANCE, *self.tolerance} - {"default"}
        rest = self.tolerance.get("default", Tolerance())
        return {n: [t.atol, t.rtol] for n in names for t in [self.tolerance_for(n)]} | {"default": [rest.atol, rest.rtol]}


@dataclass(frozen=True)
class TimingSettings:
    target_rse: float = 0.005
    warmup_ms: float = 25.0
    min_runs: int = 20
    max_runs: int = 2000
    budget_s: float = 2.0
    speedup_metric: str = "time_us"
    compile_reference: bool = True
    graph: bool = True
    rounds: int = 5
    speedup_quantile: float = 0.1
    launch_behind_flush: bool = True  # launches queue behind the L2 flush, as users time (clocks.py)
    launch_cover: float = 2.0  # ... and the device is held that many times the reference's launch time (reference.py)

    def loop(self) -> LoopSettings:
        """The worker's loop for these settings (its rounds and the reference's take shares of it)."""
        return LoopSettings(warmup_ms=self.warmup_ms, min_runs=self.min_runs, max_runs=self.max_runs,
                            budget_s=self.budget_s, target_rse=self.target_rse, quantile=self.speedup_quantile,
                            behind_flush=self.launch_behind_flush)


@dataclass(frozen=True)
class BuildSettings:
    timeout_s: float = 600.0
    jobs: int = 0
    pch: bool = True


@dataclass(frozen=True)
class Timeouts:
    load_s: float = 600.0
    shape_s: float = 300.0


@dataclass(frozen=True)
class Config:
    path: Path
    problem: Path
    solutions: Mapping[str, tuple[Path, ...]]
    shapes: tuple[Shape, ...]
    check: CheckSettings = CheckSettings()
    timing: TimingSettings = TimingSettings()
    build: BuildSettings = BuildSettings()
    timeouts: Timeouts = Timeouts()
    static_checks: str = "strict"
    cpu_shapes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {**asdict(self), "path": str(self.path), "problem": str(self.problem),
                "solutions": {k: [str(p) for p in v] for k, v in self.solutions.items()},
                "shapes": {s.name: dict(s.params) for s in self.shapes}}


@dataclass(frozen=True)
class LoopSettings:
    """One timing loop in a worker: warm up for warmup_ms, then sample until the relative standard error of
    the samples' `quantile` is under target_rse (after min_runs), the budget is spent or max_runs reached."""

    warmup_ms: float = TimingSettings.warmup_ms
    min_runs: int = TimingSettings.min_runs
    max_runs: int = TimingSettings.max_runs
    budget_s: float = TimingSettings.budget_s
    target_rse: float = TimingSettings.target_rse
    quantile: float = TimingSettings.speedup_quantile
    behind_flush: bool = False
    cover_us: float = 0.0  # with behind_flush: the device held at least this long before the start event

    def json(self) -> dict:
        return asdict(self)

    def round(self, k: int, n: int) -> LoopSettings:
        """Round k of n: a 1/n share of the budget and runs, the same precision overall; only the first
        warms up fully (the model is warm after it)."""
        min_runs = max(5, -(-self.min_runs // n))
        return replace(self, budget_s=self.budget_s / n, min_runs=min_runs,
                       max_runs=max(min_runs, -(-self.max_runs // n)), target_rse=self.target_rse * n ** 0.5,
                       warmup_ms=self.warmup_ms if k == 0 else min(self.warmup_ms, 5.0))

    def one_off(self) -> LoopSettings:
        """The reference's per-shape timings (eager, compiled back to back): half the candidate's budget."""
        return replace(self, budget_s=self.budget_s / 2)


    def short(self) -> LoopSettings:
        """CUDA-graph replays (no launch gaps) and the floors' stand-ins: fewer runs, at most 0.5 s."""
        return replace(self, min_runs=min(self.min_runs, 10), budget_s=min(self.budget_s, 0.5))

    def launch_probe(self) -> LoopSettings:
        """The empty launch timed beside each round: a few milliseconds, the host's phase during the round."""
        return replace(self, warmup_ms=min(self.warmup_ms, 2.0), min_runs=10, max_runs=40, budget_s=0.01)

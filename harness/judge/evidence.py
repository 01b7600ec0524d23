"""What the judge observed about one candidate on one shape: filled in by evaluate.py, read by verdict.py."""

from dataclasses import dataclass, field

from ..stats import Measurement, Round


@dataclass(frozen=True)
class Comparison:
    ok: bool
    kind: str
    detail: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    first_mismatch: tuple[int, ...] | None = None
    mismatches: int = 0
    uninitialized: bool = False
    weak: bool = False  # an output the check cannot tell from a constant (compare.weak_outputs)


@dataclass(frozen=True)
class CheckOutcome:
    seed: int
    phase: str
    comparison: Comparison
    replay_of: int | None = None
    late_write: bool = False
    aliases_input: bool = False
    input_mutated: bool = False
    deterministic_kept: bool = True
    thread_growth: bool = False
    extra_py_threads: tuple[str, ...] = ()


@dataclass(frozen=True)
class TimedVerification:
    index: int
    seed: int
    ok: bool
    replay: bool = False
    input_mutated: bool = False
    phase: str = "timed"
    reused: bool = False  # its output's storage was returned again by a later call


@dataclass
class Evidence:
    """Gathered stage by stage for one solution x shape; the verdict reads it whole."""

    device: str
    static_errors: list[str] = field(default_factory=list)
    static_warnings: list[str] = field(default_factory=list)
    static_policy: str = "strict"
    failure: tuple[str, str] | None = None
    harness_error: str | None = None  # the step and exception of a fault of the harness's own
    bad_output: tuple[str, str] | None = None
    reference_error: str | None = None
    patched: set[str] = field(default_factory=set)
    checks: list[CheckOutcome] = field(default_factory=list)
    timing: Measurement | None = None
    rounds: list[Round] = field(default_factory=list)
    host_gap_us: float | None = None
    device_exceeds_host: bool = False
    host_recheck: tuple[float, bool] | None = None  # the same two signals, re-measured with builds paused
    timing_thread_growth: bool = False
    timing_py_threads: list[str] = field(default_factory=list)
    timed: list[TimedVerification] = field(default_factory=list)
    judge_call_us: float | None = None  # per verified call, on the judge's own clock
    judge_noise_us: float = 0.0  # how far the two workers' no-op round trips disagree
    hidden_us: float = 0.0  # host work a call may hide behind the L2 flush (launch_behind_flush): the flush's length
    reported_fast_us: float | None = None  # the worker's reported times at the speedup's quantile
    judge_clock: dict | None = None  # the fastest call and no-op round trips of both workers (us)
    graph: Measurement | None = None
    graph_message: str | None = None
    own_kernels: bool | None = None  # whether a forward launched a kernel the candidate defines (GPU profiler)
    min_bytes: int = 0
    cache_bytes: int = 0  # the device's last-level cache
    copy_gbps: float | None = None  # a copy of the shape's minimum bytes, timed as the candidate is
    empty_gap_us: float | None = None  # the host's wait past the last event of an empty call, timed the same way
    floor_launch_us: float | None = None
    tampered: list[str] = field(default_factory=list)

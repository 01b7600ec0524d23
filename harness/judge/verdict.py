"""Where every verdict is decided: evidence about one solution on one shape in, status and flags out. Pure and
deterministic; it runs in the judge, never in a process that ran candidate code. Every threshold that turns a
measurement into a flag, or decides which timed calls are verified, is here with its reason."""

import math
from dataclasses import dataclass
from enum import StrEnum

from ..stats import quantile
from .evidence import Comparison, Evidence


class Status(StrEnum):
    """A record's status; each member is the string results.jsonl holds."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    REJECTED = "rejected"
    HARNESS_ERROR = "harness_error"


class Flag(StrEnum):
    """Every flag a verdict gives but the static checker's, which read `static:<rule>`."""

    PATCHED_RUNTIME = "patched_runtime"
    NOT_PLAIN_TENSOR = "not_plain_tensor"
    OUTPUT_ALIASES_INPUT = "output_aliases_input"
    INPUT_MUTATED = "input_mutated"
    REPLAYED_OUTPUT = "replayed_output"
    TIMED_OUTPUT_MISMATCH = "timed_output_mismatch"
    WORK_OUTSIDE_TIMING = "work_outside_timing"
    TIMER_MISMATCH = "timer_mismatch"
    FASTER_THAN_MEMORY = "faster_than_memory"
    TAMPERED_FILES = "tampered_files"
    WRONG_COUNT = "wrong_count"
    WRONG_SHAPE = "wrong_shape"
    WRONG_DTYPE = "wrong_dtype"
    WRONG_DEVICE = "wrong_device"
    MISMATCH = "mismatch"
    UNINITIALIZED_OUTPUT = "uninitialized_output"
    REFERENCE_ERROR = "reference_error"
    LAUNCH_BOUND = "launch_bound"
    NOT_GRAPH_SAFE = "not_graph_safe"
    OWN_KERNEL_NOT_LAUNCHED = "own_kernel_not_launched"
    WEAK_CHECK = "weak_check"
    UNSTABLE = "unstable"


REJECTING = {
    Flag.PATCHED_RUNTIME: "replaced a function of torch, time, builtins or the harness at run time",
    Flag.NOT_PLAIN_TENSOR: "returned something other than plain dense torch.Tensor outputs",
    Flag.OUTPUT_ALIASES_INPUT: "returned an output that shares memory with an input",
    Flag.INPUT_MUTATED: "changed its inputs",
    Flag.REPLAYED_OUTPUT: "returned the answer to an earlier input (output reuse)",
    Flag.TIMED_OUTPUT_MISMATCH: "gave wrong outputs on timed calls that checks did not see",
    Flag.WORK_OUTSIDE_TIMING: "did work after returning (side stream, thread or late writes)",
    Flag.TIMER_MISMATCH: "reported times the judge's own clock contradicts",
    Flag.FASTER_THAN_MEMORY: "ran faster than moving its minimum bytes at the measured copy bandwidth allows",
    Flag.TAMPERED_FILES: "wrote into the harness's tree or the run's results",
}
INCORRECT = {Flag.WRONG_COUNT, Flag.WRONG_SHAPE, Flag.WRONG_DTYPE, Flag.WRONG_DEVICE, Flag.MISMATCH,
             Flag.UNINITIALIZED_OUTPUT}
INFO = {
    Flag.LAUNCH_BOUND: "time within 1.5x of the shape's launch floor: the figure measures launch overhead",
    Flag.NOT_GRAPH_SAFE: "CUDA-graph capture failed or replays gave wrong outputs; gpu_time_us is null",
    Flag.OWN_KERNEL_NOT_LAUNCHED: "a forward under the GPU profiler launched none of the kernels the source defines",
    Flag.WEAK_CHECK: "an output's reference values are too close to one constant for the check to tell them apart; "
                  "not ranked",
    Flag.UNSTABLE: "the speedup's 95% interval reaches beyond 1.5x either side of it: no point figure; not ranked",
}
UNRANKED = {Flag.WEAK_CHECK, Flag.UNSTABLE}
RUNTIME_DECIDED = "torch_compute_in_forward"
"""The static warning that the launched kernels replace where the GPU profiler saw them."""

# Thresholds, each with its reason.
LAUNCH_BOUND_RATIO = 1.5          # issue spec: within 1.5x of the empty launch
FASTER_THAN_MEMORY_RATIO = 1.5    # honest kernels stay under ~1.25x the bandwidth of a copy of the same bytes timed
                                  # the same way (outputs left in L2 included); applied when the minimum bytes are
                                  # at least twice the last-level cache
HOST_GAP_SLACK_US = 30.0          # host-vs-events slack beyond the gap of an empty call timed the same way
HOST_GAP_REL = 0.2                # ... plus 20% of the call's own time
TIMER_BOUND = {"cuda": (0.5, 20.0), "cpu": (0.5, 50.0)}  # (ratio, slack us): reported times under ratio x
                                  # (the judge's per-call time less its noise) less slack contradict it. GPU: the
                                  # times at the speedup's quantile; on an H100 an honest call's figure there read
                                  # 0.28-1.3x the judge's per-call time, the no-ops of two workers disagreeing by
                                  # up to 250 us. CPU: the median (on the loaded 2-core host an honest call's 0.1
                                  # quantile read 0.35x the judge's clock and its median 0.69x)
PROJECTION_SIGMAS = 20.0          # a verified timed call's projection may differ from the reference's by 20
                                  # standard deviations of an honest output's error (worker/fingerprint.py)
FAST_TAIL_QUANTILE = 2.0          # every timed call at or under twice the speedup's quantile is verified ...
FAST_TAIL_MAX = 256               # ... up to 256 of them, or more where that many do not reach the quantile
VERIFY_MIN_CALLS = 20             # at least 20 timed calls of every shape are verified ...
VERIFY_MIN_SHARE = 0.10           # ... and at least 10% of them: a candidate wrong on a share s of its calls
                                  # passes with probability (1 - s)^k, under 1e-9 at s = 10% where k >= 200
MIN_TIMED_SAMPLES = 2             # the worker's loop returns at least two samples whatever its budget
WEAK_FRACTION = 0.5               # where the best constant (zero or the reference's mean) passes the
                                  # tolerance, an answer's RMS error must be under half the constant's
UNSTABLE_RATIO = 1.5              # issue spec: a speedup whose 95% interval reaches past 1.5x either side of it
WEAK_RESOLUTION_ULPS = 16         # a spread under 16 units in the last place of the largest |value| cannot be
                                  # checked on its own scale (rounding alone moves an honest answer that far)


@dataclass(frozen=True)
class Decision:
    status: Status
    flags: tuple[str, ...]
    message: str
    failing_seed: int | None = None
    comparison: Comparison | None = None


def integrity_flags(e: Evidence) -> dict[str, str]:
    """Flags that reject, each with the observation behind it."""
    flags: dict[str, str] = {}
    if e.patched:
        flags[Flag.PATCHED_RUNTIME] = "replaced " + ", ".join(sorted(e.patched)[:5])
    if e.bad_output and e.bad_output[0] == "not_plain_tensor":
        flags[Flag.NOT_PLAIN_TENSOR] = e.bad_output[1]
    for c in e.checks:
        if c.aliases_input:
            flags[Flag.OUTPUT_ALIASES_INPUT] = f"seed {c.seed}: output shares storage with an input"
        if c.input_mutated:
            flags[Flag.INPUT_MUTATED] = f"seed {c.seed}: inputs differ after the call"
        if not c.deterministic_kept:
            flags[Flag.PATCHED_RUNTIME] = f"seed {c.seed}: turned off the harness's uninitialized-memory poisoning"
        if c.replay_of == -1:
            flags[Flag.REPLAYED_OUTPUT] = f"seed {c.seed}: returned an earlier call's output tensor again, not rewritten"
        elif c.replay_of is not None:
            flags[Flag.REPLAYED_OUTPUT] = f"seed {c.seed}: output equals the reference for seed {c.replay_of}"
        if c.late_write:
            flags[Flag.WORK_OUTSIDE_TIMING] = f"seed {c.seed}: output changed after forward returned"
        if c.extra_py_threads:
            flags[Flag.WORK_OUTSIDE_TIMING] = f"threads left running: {', '.join(c.extra_py_threads[:3])}"
        if c.thread_growth:
            flags[Flag.WORK_OUTSIDE_TIMING] = f"seed {c.seed}: a call started native threads"
    if e.timing_py_threads:
        flags[Flag.WORK_OUTSIDE_TIMING] = f"threads left running: {', '.join(e.timing_py_threads[:3])}"
    if e.timing_thread_growth:
        flags[Flag.WORK_OUTSIDE_TIMING] = "native threads were started during timed calls"
    reused = [v for v in e.timed if v.reused]
    if reused:
        flags[Flag.REPLAYED_OUTPUT] = (f"{len(reused)} timed calls' outputs were returned again by a later call "
                                    f"(first: call {reused[0].index}): a drop-in replacement returns fresh outputs")
    bad = [v for v in e.timed if not v.ok and not v.reused]
    if bad:
        flags[Flag.TIMED_OUTPUT_MISMATCH] = (f"{len(bad)} of {len(e.timed)} verified timed calls gave wrong outputs "
                                          f"(first: {bad[0].phase} call {bad[0].index})")
        if any(v.replay for v in bad):
            flags[Flag.REPLAYED_OUTPUT] = "a timed call returned the previous call's answer"
    if any(v.input_mutated for v in e.timed):
        flags[Flag.INPUT_MUTATED] = "inputs differ after a timed call"
    t = e.timing
    if t is not None:
        flags.update(host_timing_flags(e))
        if timer_contradicts(e):
            what, reported = _reported(e)
            flags[Flag.TIMER_MISMATCH] = (f"reported {reported:.1f} us ({what}), the judge's clock saw "
                                       f"{e.judge_call_us:.1f} +- {e.judge_noise_us:.1f} us per verified call"
                                       + (f", {e.hidden_us:.1f} us of it hideable behind the flush" if e.hidden_us
                                          else ""))
        gbps = e.min_bytes / t.median_us / 1e3 if t.median_us > 0 else 0.0
        if e.copy_gbps and e.min_bytes >= max(2 * e.cache_bytes, 1) and gbps > FASTER_THAN_MEMORY_RATIO * e.copy_gbps:
            flags[Flag.FASTER_THAN_MEMORY] = (f"{gbps:.0f} GB/s for its minimum bytes, copy bandwidth is "
                                           f"{e.copy_gbps:.0f} GB/s")
    if e.tampered:
        flags[Flag.TAMPERED_FILES] = "changed " + ", ".join(e.tampered[:3])
    return flags


def _host_gap_limit(e: Evidence) -> float | None:
    if e.device != "cuda" or e.empty_gap_us is None or e.timing is None:
        return None
    return e.empty_gap_us + HOST_GAP_SLACK_US + HOST_GAP_REL * e.timing.median_us


def host_timing_suspect(e: Evidence) -> bool:
    """Host timing of the timed rounds says device work ran outside the events, or the events span more than
    the host saw: a reason to re-measure with every build paused, never to reject alone (a busy host's
    wake-ups delay the host's clock, not the device's)."""
    limit = _host_gap_limit(e)
    return (limit is not None and e.host_gap_us is not None and e.host_gap_us > limit) or e.device_exceeds_host


def host_timing_flags(e: Evidence) -> dict[str, str]:
    """Host-timing flags that both the timed rounds and the re-measure with builds paused show."""
    if not host_timing_suspect(e) or e.host_recheck is None:
        return {}
    limit, (gap, exceeds) = _host_gap_limit(e), e.host_recheck
    flags = {}
    if limit is not None and e.host_gap_us is not None and e.host_gap_us > limit and gap > limit:
        flags[Flag.WORK_OUTSIDE_TIMING] = (f"host waited {e.host_gap_us:.0f} us past the last event, {gap:.0f} us "
                                        f"with builds paused (limit {limit:.0f} us): device work the events did "
                                        "not see")
    if e.device_exceeds_host and exceeds:
        flags[Flag.TIMER_MISMATCH] = "event time exceeds the host time around the same calls, with builds paused too"
    return flags


def _reported(e: Evidence) -> tuple[str, float]:
    if e.device == "cuda" and e.reported_fast_us is not None:
        return "at the speedup's quantile", e.reported_fast_us
    return "median", e.timing.median_us


def timer_contradicts(e: Evidence) -> bool:
    """The worker's reported times are well under what the judge's own clock saw per verified call. With launches
    queued behind the L2 flush, up to the flush's length of a call's host work runs while the flush does and is
    on the judge's clock only: that much (hidden_us, the flush timed by the reference worker) is taken off first,
    so an honest call, reporting at least its device time plus its host work beyond the flush, always clears
    the bound, and a forged report gains at most the flush's length."""
    if e.judge_call_us is None or e.timing is None:
        return False
    ratio, slack_us = TIMER_BOUND.get(e.device, TIMER_BOUND["cpu"])
    return _reported(e)[1] < ratio * (e.judge_call_us - e.judge_noise_us - e.hidden_us) - slack_us


def info_flags(e: Evidence) -> list[str]:
    weak = [Flag.WEAK_CHECK] if any(c.comparison.weak for c in e.checks) else []
    if e.timing is None or e.device != "cuda":
        return weak
    launch_bound = bool(e.floor_launch_us) and e.timing.median_us <= LAUNCH_BOUND_RATIO * e.floor_launch_us
    not_graph_safe = e.graph is None and bool(e.graph_message)
    return [f for f, on in ((Flag.LAUNCH_BOUND, launch_bound), (Flag.NOT_GRAPH_SAFE, not_graph_safe),
                            (Flag.OWN_KERNEL_NOT_LAUNCHED, e.own_kernels is False)) if on] + weak


def figure_flags(speedup: float | None, interval: tuple[float, float] | None) -> list[str]:
    """Flags of a correct record's speedup, read once its figures are computed from the evidence."""
    if not speedup or not interval:
        return []
    lo, hi = interval
    return [Flag.UNSTABLE] if lo <= 0 or speedup / lo > UNSTABLE_RATIO or hi / speedup > UNSTABLE_RATIO else []


def decide(e: Evidence) -> Decision:
    off = e.static_policy == "off"
    static = [] if off else [f"static:{r}" for r in e.static_errors]
    # where the kernels a forward launched are known, they decide whether its own kernel ran, not the text
    warnings = [w for w in e.static_warnings if e.own_kernels is None or not w.startswith(RUNTIME_DECIDED)]
    flags = static + ([] if off else [f"static:{r}" for r in warnings])
    build_failure = {"compile_error": Status.COMPILE_ERROR, "build_timeout": Status.TIMEOUT}
    if e.failure and e.failure[0] in build_failure:
        return Decision(build_failure[e.failure[0]], tuple(flags), e.failure[1])
    if static and e.static_policy == "strict":
        return Decision(Status.REJECTED, tuple(flags), "static checks: " + "; ".join(e.static_errors))
    integrity = integrity_flags(e)
    flags = list(dict.fromkeys(flags + list(integrity)))
    failed = next((c for c in e.checks if not c.comparison.ok), None)
    if integrity:
        msg = "{}: {}".format(*next(iter(integrity.items())))
        if failed is None:
            return Decision(Status.REJECTED, tuple(flags), msg)
        return Decision(Status.REJECTED, tuple(dict.fromkeys(flags + [failed.comparison.kind])),
                        f"{msg}; seed {failed.seed}: {failed.comparison.detail}", failed.seed, failed.comparison)
    if e.harness_error:
        return Decision(Status.HARNESS_ERROR, tuple(flags), f"harness error in {e.harness_error}")
    if e.reference_error:
        return Decision(Status.RUNTIME_ERROR, tuple(flags + [Flag.REFERENCE_ERROR]), f"reference failed: {e.reference_error}")
    if failed is not None:
        phase = "after timing" if failed.phase == "post" else "check"
        return Decision(Status.INCORRECT, tuple(flags + [failed.comparison.kind]),
                        f"seed {failed.seed} ({phase}): {failed.comparison.detail}", failed.seed, failed.comparison)
    if e.bad_output:
        return Decision(Status.RUNTIME_ERROR, tuple(flags), e.bad_output[1])
    if e.failure:
        return Decision(Status.TIMEOUT if e.failure[0] == "timeout" else Status.RUNTIME_ERROR, tuple(flags), e.failure[1])
    if e.timing is None:
        return Decision(Status.RUNTIME_ERROR, tuple(flags), "no timing was recorded")
    return Decision(Status.CORRECT, tuple(dict.fromkeys(flags + info_flags(e))), e.graph_message or "",
                    comparison=e.checks[-1].comparison if e.checks else None)


def verified_count(n_calls: int) -> int:
    """How many of a shape's n timed calls the judge verifies at least."""
    return min(n_calls, max(VERIFY_MIN_CALLS, math.ceil(VERIFY_MIN_SHARE * n_calls)))


def fast_tail(replies: list[dict], q: float) -> list[tuple[int, int]]:
    """The timed calls (batch, call) at or under FAST_TAIL_QUANTILE times the speedup's quantile, fastest first:
    a speedup read at a low quantile rests on the fastest calls, so every one of them is verified, not a random
    sample that a candidate wrong on one call in eight would pass one time in eight."""
    timed = sorted((us, b, i) for b, r in enumerate(replies)
                   for us, i in zip(r["device_us"], r.get("sample_calls") or []))
    if not timed:
        return []
    limit = quantile([us for us, _, _ in timed], min(FAST_TAIL_QUANTILE * q, 0.5))
    cap = max(FAST_TAIL_MAX, math.ceil(q * len(timed)) + 1)
    return [(b, i) for us, b, i in timed if us <= limit][:cap]

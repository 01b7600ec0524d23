"""From evidence to a record: the verdict, then the figures a user reads (speedups, floors, bandwidth)."""

from ..problem import level_of
from ..settings import Shape
from ..stats import measured_ratio_interval, pooled_ratio, ratio_interval, summarize
from . import verdict
from .builds import BuildResult, Candidate
from .evidence import Evidence
from .records import CheckFigures, Diagnostics, Floors, Record, TimingFigures
from .reference import RefTiming


def _median(m) -> float | None:
    return m.median_us if m is not None else None


def speedups(ev: Evidence, ref_t: RefTiming, metric: str, q: float) -> tuple[float | None, float | None, float | None,
                                                                          tuple[float, float] | None]:
    """Speedup against the eager reference, against torch.compile, the time over a copy of the same bytes, and the
    eager speedup's 95% interval. With paired rounds (time_us): the reference's calls' q-quantile over the
    candidate's, every call of each side pooled over the rounds (stats.pooled_ratio), the interval from the
    rounds' spread (stats.ratio_interval); torch.compile chained through the compiled/eager ratio the lane timed
    back to back. Without: medians over medians, the interval from their standard errors."""
    t = ev.timing
    cand = [r.candidate for r in ev.rounds]
    refs = [r.reference for r in ev.rounds]
    eager = pooled_ratio(refs, cand, q) if metric == "time_us" else None
    if eager is not None:
        compiled = eager * ref_t.eager.median_us / ref_t.compiled.median_us if ref_t.eager and ref_t.compiled else None
        return eager, compiled, pooled_ratio(cand, [r.copy for r in ev.rounds], q), ratio_interval(refs, cand, q, eager)
    cand_m = ev.graph if metric == "gpu_time_us" else t
    ref_m = ref_t.graph if metric == "gpu_time_us" else ref_t.eager
    eager = ref_m.median_us / cand_m.median_us if ref_m and cand_m and cand_m.median_us > 0 else None
    compiled = ref_t.compiled.median_us / t.median_us if ref_t.compiled and t and t.median_us > 0 else None
    ci = measured_ratio_interval(ref_m, cand_m) if eager is not None else None
    return eager, compiled, t.median_us / ref_t.floor_copy.median_us if t and ref_t.floor_copy else None, ci


def make_record(plan, lane, cand: Candidate, shape: Shape, ev: Evidence, ref_t: RefTiming, log: str,
                times_file: str | None, profile: dict | None) -> Record:
    d = verdict.decide(ev)
    correct = d.status == verdict.Status.CORRECT
    flags = list(d.flags)
    t = ev.timing
    timing = floors = speedup = speedup_compile = speedup_ci = speedup_compile_ci = None
    if t is not None:
        eager, compiled, copy_ratio, ci = speedups(ev, ref_t, plan.config.timing.speedup_metric,
                                                   plan.config.timing.speedup_quantile)
        if correct:
            speedup, speedup_compile = eager, compiled
            speedup_ci = list(ci) if ci else None
            flags += verdict.figure_flags(eager, ci)
            if ci and eager and compiled:  # chained: the compiled/eager ratio scales both bounds
                speedup_compile_ci = [b * compiled / eager for b in ci]
        copies = [x for r in ev.rounds for x in r.copy]
        copy_us = summarize(copies).median_us if copies else _median(ref_t.floor_copy)
        refs = [x for r in ev.rounds for x in r.reference]
        ref_us = summarize(refs).median_us if ev.rounds else _median(ref_t.eager)
        if copy_ratio is None and copy_us:
            copy_ratio = t.median_us / copy_us
        bw = ev.min_bytes / t.median_us / 1e3 if ev.min_bytes and t.median_us > 0 else None
        timing = TimingFigures(
            time_us=t.median_us, runs=t.runs, iqr_us=t.iqr_us, min_us=t.min_us, rse=t.rse,
            gpu_time_us=_median(ev.graph), judge_us=ev.judge_call_us,
            verified_calls=sum(v.phase == "timed" for v in ev.timed),
            judge_noise_us=ev.judge_noise_us if ev.judge_call_us is not None else None, ref_time_us=ref_us, ref_compile_time_us=_median(ref_t.compiled),
            ref_gpu_time_us=_median(ref_t.graph), speedup_rounds=len(ev.rounds) or None,
            copy_ratio=copy_ratio if correct else None, bytes_min=ev.min_bytes or None,
            bandwidth_gbps=bw if correct else None,
            bandwidth_frac=bw / ev.copy_gbps if correct and bw and ev.copy_gbps else None)
        floors = Floors(launch_us=ev.floor_launch_us, read_us=_median(ref_t.floor_read), copy_us=copy_us,
                        hidden_us=round(ev.hidden_us, 1) if ev.hidden_us else None)
    cmps = [c.comparison for c in ev.checks]
    check = CheckFigures(
        max_abs_err=max((c.max_abs_err for c in cmps if c.max_abs_err is not None), default=None),
        max_rel_err=max((c.max_rel_err for c in cmps if c.max_rel_err is not None), default=None),
        first_mismatch=list(d.comparison.first_mismatch) if d.comparison and d.comparison.first_mismatch else None,
        seed=d.failing_seed)
    diagnostics = Diagnostics([r.medians() for r in ev.rounds], times_file, ev.judge_clock) if ev.rounds else None
    return Record(solution=cand.name, problem=plan.problem.name, shape=shape.name, status=d.status,
                  level=level_of(plan.problem.path),
                  flags=flags, message=d.message, speedup=speedup, speedup_compile=speedup_compile,
                  speedup_ci=speedup_ci, speedup_compile_ci=speedup_compile_ci,
                  check=check, timing=timing, floors=floors, diagnostics=diagnostics, device=lane.device_name,
                  lane=lane.index, solution_path=str(cand.path), log=log, profile=profile)


def unrun_records(plan, cand: Candidate, shapes: list[Shape], static: tuple[list[str], list[str]],
                  build: BuildResult | None, device_name: str, fault: str | None = None) -> list[Record]:
    """Records for a candidate that never runs: unreadable, rejected by static checks, failed to build, or
    (fault) left without a record by a fault of the harness's own."""
    out = []
    for shape in shapes:
        ev = Evidence(device=plan.device, static_policy=plan.static_policy, static_errors=static[0],
                      static_warnings=static[1], harness_error=fault)
        if cand.error:
            ev.failure = ("unreadable", cand.error)
        elif build is not None and build.status in ("compile_error", "timeout"):
            ev.failure = ("build_timeout" if build.status == "timeout" else "compile_error", build.message)
        d = verdict.decide(ev)
        out.append(Record(solution=cand.name, problem=plan.problem.name, shape=shape.name, status=d.status,
                          level=level_of(plan.problem.path),
                          flags=list(d.flags), message=d.message, device=device_name, solution_path=str(cand.path),
                          log=build.log if build else ""))
    return out

"""The evaluation steps of one shape, in the order STEPS declares; CandidateEvaluation._run_steps runs them, each
with a live worker set up for the shape. Each step adds to the shape's Evidence and decides nothing: the verdict
reads the evidence whole afterwards (verdict.py)."""

from __future__ import annotations

import dataclasses
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..protocol import OVERWRITTEN, Fingerprints
from ..seeds import derive
from ..settings import JUDGE_RECHECK_PAUSES_S, LoopSettings, Shape
from ..stats import quantile, summarize
from . import static_checks, verdict
from .compare import fingerprint_matches
from .evidence import Evidence, TimedVerification
from .processes import WorkerGone, judge_timed
from .reference import RefTiming

JUDGE_ROUNDS = 20
RECHECK_MARGIN_S = 2.0  # a re-measure of the judge's clock starts only with this much of the shape's time left


class CandidateFailure(Exception):
    def __init__(self, message: str, cuda_error: bool = False, bad_output: str | None = None):
        super().__init__(message)
        self.cuda_error = cuda_error
        self.bad_output = bad_output


@dataclass
class ShapeRun:
    """One shape's evaluation in progress: what the steps share."""

    shape: Shape
    ev: Evidence
    ref: object
    deadline: float
    tols: list
    projection: bool
    batches: list[tuple[int, dict]] = field(default_factory=list)


def shape_loop(ce, shape: Shape) -> LoopSettings:
    """The plan's timing loop with the shape's hold before each call (the reference's: both sides' launches hide
    alike)."""
    return dataclasses.replace(ce.plan.loop, cover_us=ce.lane.timings.get(shape.name, RefTiming()).cover_us)


def floors(ev: Evidence, launches: list[float], copies: list[float]) -> None:
    """The launch floor and the copy bandwidth a record is judged against: the empty launch and the copy of the
    shape's minimum bytes, timed through the candidates' loop, in the record's own rounds where it has them."""
    copy_us = summarize(copies).median_us if copies else None
    ev.floor_launch_us = summarize(launches).median_us if launches else None
    ev.copy_gbps = ev.min_bytes / copy_us / 1e3 if copy_us and ev.min_bytes else None


def timed_rounds(ce, shape: Shape, ev: Evidence, projection: bool, deadline: float) -> list[tuple[int, dict]]:
    """The candidate's timed calls in `timing.rounds` rounds, each followed by short timings (a quarter of the
    round's budget each) of the eager reference, an empty launch and the copy floor, the candidate stopped
    meanwhile: both sides of a speedup timed within a second of each other (stats.pooled_ratio)."""
    plan = ce.plan
    ce.lane.ref.turn.open_to_spares(False)
    n = plan.config.timing.rounds
    base = plan.time_seed(shape.name)
    pair = n > 1 and ce.lane.timings.get(shape.name, RefTiming()).eager is not None
    batches: list[tuple[int, dict]] = []
    for k in range(n):
        base_k = base if k == 0 else derive(base, "round", k)
        loop = shape_loop(ce, shape).round(k, n)
        r = ce.ask("time", deadline, base_seed=base_k, loop=loop.json(), verify=True, projection=projection)
        batches.append((base_k, r))
        if not pair:
            continue
        try:
            with ce.stages("reference rounds"), ce.worker.frozen():
                paired = ce.lane.ref.time_round(shape, derive(base, "reference round", k),
                                                dataclasses.replace(loop, budget_s=loop.budget_s / 4), ev.min_bytes)
        except (RuntimeError, WorkerGone):
            pair, ev.rounds = False, []
            continue
        ev.rounds.append(dataclasses.replace(paired, candidate=tuple(r["device_us"])))
    if ev.rounds:
        floors(ev, [x for r in ev.rounds for x in r.launch], [x for r in ev.rounds for x in r.copy])
        flush = [x for r in ev.rounds for x in r.flush]
        ev.hidden_us = statistics.median(flush) if flush else ev.hidden_us
    return batches


def verify_timed(ce, shape: Shape, replies: list[tuple[int, dict]], projection: bool, tols,
                 must: list[tuple[int, int]] = ()) -> list[TimedVerification]:
    """Fingerprint the timed calls `must` (batch, call) and a random sample of the others, chosen now that they
    ran, at least verdict.verified_count of them, against the reference's answers for the same inputs; calls
    numbered across batches. Nothing in a reply exempts a call: a call the worker says a later call overwrote
    fails (its output was reused), as do a call with no fingerprints and a batch with too few samples."""
    batches = [(base, r.get("calls") or {}, int(r.get("unsampled", 0)) + len(r["device_us"])) for base, r in replies]
    offsets = [sum(n for _, _, n in batches[:b]) for b in range(len(batches))]
    out = [TimedVerification(offsets[b], base, ok=False, phase="timed (short answer)")
           for b, (base, r) in enumerate(replies) if len(r["device_us"]) < verdict.MIN_TIMED_SAMPLES]
    every = [(b, i) for b, (_, _, n) in enumerate(batches) for i in range(n)]
    reused = {(b, i) for b, i in every if batches[b][1].get(str(i)) == OVERWRITTEN}
    out += [TimedVerification(offsets[b] + i, derive(batches[b][0], i), ok=False, reused=True)
            for b, i in sorted(reused)]
    chosen = set(must) & set(every) - reused
    rest = [c for c in every if c not in chosen and c not in reused]
    k = max(ce.plan.config.check.verify_timed, verdict.verified_count(len(every)) - len(chosen))
    sample = sorted(chosen | set(secrets.SystemRandom().sample(rest, min(k, len(rest)))))
    seeds = {(b, i): derive(batches[b][0], i) for b, i in sample}
    fps = ce.lane.ref.fingerprints(ce.lane.store, shape, list(seeds.values()), projection)
    for b, i in sample:
        mine, want = Fingerprints.read(batches[b][1].get(str(i))), Fingerprints.decode(fps[seeds[(b, i)]])
        if mine is None:
            out.append(TimedVerification(offsets[b] + i, seeds[(b, i)], ok=False))
            continue
        ok = fingerprint_matches(want, mine, tols)
        replay = not ok and replayed(ce, shape, batches, b, i, mine.outputs, projection)
        out.append(TimedVerification(offsets[b] + i, seeds[(b, i)], ok=ok, replay=replay,
                                     input_mutated=mine.inputs != want.inputs))
    return out


def replayed(ce, shape: Shape, batches: list[tuple[int, dict, int]], b: int, i: int, got: tuple[int, ...],
             projection: bool) -> bool:
    """A wrong timed output that is the right answer for another input the candidate has seen (a check seed,
    the previous call, or another timed call of any batch that returned the same output) is a replay."""
    others = ce.plan.check_seeds(shape.name) + [ce.plan.post_seed(shape.name)]
    others += [derive(base, int(j)) for c, (base, calls, _) in enumerate(batches) for j, fp in calls.items()
               if (c, int(j)) != (b, i) and getattr(Fingerprints.read(fp), "outputs", None) == got][:8]
    if i > 0:
        others.append(derive(batches[b][0], i - 1))
    fps = ce.lane.ref.fingerprints(ce.lane.store, shape, others, projection)
    return any(Fingerprints.decode(fps[s]).outputs == got for s in others)


def step_kernels(ce, run: ShapeRun) -> None:
    """Whether one forward launches a kernel the candidate defines, as the GPU profiler names its launches;
    once a candidate, after its first shape's timings. Its worker then goes: no later timing runs in a
    process the profiler has attached to. What the watch reports of this call is set aside with that process
    (nothing measured runs there after it), as is a probe that fails or sees no kernel at all."""
    ce.probed = True
    patched = set(ce.patched)
    try:
        seed = derive(ce.plan.post_seed(run.shape.name), "kernels")
        names = ce.ask("kernels", run.deadline, seed=seed).get("kernels")
    except (CandidateFailure, WorkerGone):
        names = None
    ce.patched = patched
    if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
        ce.own_kernels = static_checks.launched_own_kernel(ce.kernels, names)
    ce.close(kill=True)


def judge_clock_rounds(ce, shape: Shape, ev: Evidence, base: int, projection: bool, tols, deadline: float,
                       freeze: bool = False) -> tuple[float, float, dict] | None:
    """Per-call time on the judge's clock (processes.judge_timed) and its noise: the fastest verified call
    round trip less the fastest no-op one, the reference worker's no-ops the ceiling of the candidate's
    (which it could slow); the noise is how far the two workers' fastest no-ops, the same work, disagree;
    then the minima behind both, for the record.
    Every call's answer is verified. Before a mismatch can accuse a candidate it is measured again, over twice
    the rounds, with every build paused (freeze): on a busy host the judge's wake-ups alone can add
    milliseconds to every round."""
    rounds = 2 * JUDGE_ROUNDS if freeze else JUDGE_ROUNDS
    seeds = [derive(base, k) for k in range(rounds)]
    try:
        with ce.lane.tamper.gate.shared(), ce.lane.ref.turn(pause_builds=freeze):
            calls, noops = judge_timed(ce.worker, seeds, projection, deadline - time.monotonic())
    except RuntimeError as e:
        raise CandidateFailure(f"forward during the judge's clock: {e}") from None
    ref_calls, ref_noops = [], []
    try:
        with ce.worker.frozen():
            ref_calls, ref_noops = ce.lane.ref.judge_timed(
                shape, [derive(base, "reference", k) for k in range(rounds)], projection, pause_builds=freeze)
    except (RuntimeError, WorkerGone):
        pass
    want = ce.lane.ref.fingerprints(ce.lane.store, shape, [s for _, s, _ in calls], projection)
    answered = {s for _, s, _ in calls}
    ev.timed += [TimedVerification(k, seeds[k], ok=False, phase="judge's clock (no answer)")
                 for k in range(0, rounds, 2) if seeds[k] not in answered]
    verified = []
    for k, (us, seed, raw) in enumerate(calls):
        fp, ref = Fingerprints.read(raw), Fingerprints.decode(want[seed])
        ok = fp is not None and fingerprint_matches(ref, fp, tols)
        ev.timed.append(TimedVerification(k, seed, ok=ok, input_mutated=ok and fp.inputs != ref.inputs,
                                          phase="judge's clock"))
        verified += [us] if ok else []
    if not verified or not (noops or ref_noops):
        return None
    minima = {k: round(min(v), 1) if v else None for k, v in (
        ("calls", verified), ("noops", noops), ("ref_calls", [us for us, _, _ in ref_calls]),
        ("ref_noops", ref_noops))}
    noise = abs(min(noops) - min(ref_noops)) if noops and ref_noops else 0.0
    return max(min(verified) - min(noops + ref_noops), 0.0), noise, minima


def step_graph(ce, run: ShapeRun) -> None:
    """Device time without launch gaps (CUDA-graph replays), each replay's answer verified."""
    ev, base = run.ev, ce.plan.graph_seed(run.shape.name)
    try:
        g = ce.ask("graph", run.deadline, base_seed=base, loop=shape_loop(ce, run.shape).short().json(),
                   projection=run.projection)
    except (CandidateFailure, WorkerGone) as e:
        ev.graph_message = f"graph capture failed: {e}"
        if isinstance(e, WorkerGone) or e.cuda_error:
            ce.close(kill=True)
        return
    if not g.get("graph_ok"):
        ev.graph_message = g.get("message", "graph capture failed")
        ce.close(kill=True)  # a failed capture leaves torch's CUDA RNG unusable in that process
        return
    if all(c.ok for c in verify_timed(ce, run.shape, [(base, g)], run.projection, run.tols)):
        ev.graph = summarize(g["device_us"])
    else:
        ev.graph_message = "graph replays gave wrong outputs (work outside the captured stream?)"


def step_checks(ce, run: ShapeRun) -> bool:
    for k, seed in enumerate(ce.plan.check_seeds(run.shape.name)):
        outcome = ce.check(run.ev, run.ref, seed, "check", run.deadline, first=(k == 0))
        if not outcome.comparison.ok or verdict.integrity_flags(run.ev):
            return False
    return True


def step_timing(ce, run: ShapeRun) -> None:
    ev = run.ev
    run.batches = timed_rounds(ce, run.shape, ev, run.projection, run.deadline)
    replies = [r for _, r in run.batches]
    dev = [x for r in replies for x in r["device_us"]]
    if not dev:
        raise CandidateFailure("timing returned no samples")
    ev.timing = summarize(dev)
    ev.reported_fast_us = quantile(sorted(dev), ce.plan.config.timing.speedup_quantile)
    if ce.plan.device == "cuda":
        ev.host_gap_us, ev.device_exceeds_host = host_signals(replies)
    ev.timing_thread_growth = any(a < b for a, b in (r.get("threads") or [0, 0] for r in replies))
    ev.timing_py_threads = sorted({t for r in replies for t in (r.get("extra_py_threads") or [])})


def step_recheck(ce, run: ShapeRun) -> None:
    """Host timing alone never rejects: where it looks wrong, one more round is timed with every build
    paused, and the verdict reads both (verdict.host_timing_flags). Its calls are verified with the rest."""
    base = derive(ce.plan.time_seed(run.shape.name), "recheck")
    loop = shape_loop(ce, run.shape).round(1, max(2, ce.plan.config.timing.rounds))
    r = ce.ask("time", run.deadline, pause_builds=True, base_seed=base, loop=loop.json(), verify=True,
               projection=run.projection)
    run.batches.append((base, r))
    run.ev.host_recheck = host_signals([r]) if r["device_us"] else None


def step_verify(ce, run: ShapeRun) -> None:
    replies = [r for _, r in run.batches]
    run.ev.timed = verify_timed(ce, run.shape, run.batches, run.projection, run.tols,
                                must=verdict.fast_tail(replies, ce.plan.config.timing.speedup_quantile))
    ce.check(run.ev, run.ref, ce.plan.post_seed(run.shape.name), "post", run.deadline, first=False)


def step_judge_clock(ce, run: ShapeRun) -> None:
    """The judge's clock over one window, and where it contradicts the reported times, over more windows after
    the pauses JUDGE_RECHECK_PAUSES_S names, builds paused: the lowest measure decides, and the record's
    judge_clock lists every window (its start in seconds, per-call time and noise in us)."""
    ev, shape = run.ev, run.shape
    base, start, windows = ce.plan.judge_seed(shape.name), time.monotonic(), []
    pauses = JUDGE_RECHECK_PAUSES_S.get(ce.plan.device, (0.0,))
    for k, pause in enumerate((None, *pauses)):
        if pause is not None:
            if not verdict.timer_contradicts(ev) or (pause and time.monotonic() + pause + RECHECK_MARGIN_S > run.deadline):
                break
            time.sleep(pause)
        at = time.monotonic() - start
        m = judge_clock_rounds(ce, shape, ev, derive(base, "again", k) if k else base, run.projection, run.tols,
                               run.deadline, freeze=pause is not None)
        if m is None:
            continue
        windows.append({"at_s": round(at, 2), "us": round(m[0], 1), "noise_us": round(m[1], 1)})
        if ev.judge_call_us is None or m[0] - m[1] < ev.judge_call_us - ev.judge_noise_us:
            ev.judge_call_us, ev.judge_noise_us, ev.judge_clock = m
    if ev.judge_clock is not None:
        ev.judge_clock = {**ev.judge_clock, "windows": windows}


def host_signals(replies: list[dict]) -> tuple[float, bool]:
    """What host timing says of timed calls: the host's median wait past the last event, and whether the events
    span more than the host saw around the same calls."""
    dev = [x for r in replies for x in r["device_us"]]
    host = [x for r in replies for x in r["host_us"]]
    span = [x for r in replies for x in r["span_us"]]
    return statistics.median(h - s for h, s in zip(host, span)), statistics.median(dev) > 1.05 * statistics.median(host) + 5.0


@dataclass(frozen=True)
class Step:
    """One evaluation step: runs on `devices` where `when` (if given) holds; returning False ends the shape."""

    name: str
    run: Callable[[object, ShapeRun], bool | None]
    devices: tuple[str, ...] = ("cpu", "cuda")
    when: Callable[[object, ShapeRun], bool] | None = None


STEPS: tuple[Step, ...] = (
    Step("setup", lambda ce, run: None),  # the loop's _ready does it, as before every step
    Step("checks", step_checks),
    Step("timing", step_timing),
    Step("timing recheck", step_recheck, when=lambda ce, run: verdict.host_timing_suspect(run.ev)),
    Step("verify", step_verify),
    Step("judge_clock", step_judge_clock),
    Step("graph", step_graph, ("cuda",), when=lambda ce, run: ce.plan.config.timing.graph),
    Step("kernels", step_kernels, ("cuda",), when=lambda ce, run: bool(ce.kernels) and not ce.probed),
)
"""The order every shape is evaluated in: one loop (evaluate.CandidateEvaluation._run_steps) runs it."""

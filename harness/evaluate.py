"""Evaluate one candidate on one lane: drive its worker, gather evidence, hand it to the verdict.

Per shape: checks on fresh seeds (outputs compared here, in the judge), timed calls on refilled
inputs with a sample of them verified by fingerprint after the fact, one more full check after
timing, the judge's own clock, then CUDA-graph replay. A worker that dies, hangs or hits a CUDA
error is discarded; the next shape starts a clean one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import secrets
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import verdict
from .build import BuildResult, Candidate, builds_frozen
from .check import compare_outputs, fingerprint_matches, read_output_file, same_as
from .config import Shape
from .fingerprint import OVERWRITTEN
from .records import Record
from .reference import DeviceTurn, ReferenceRunner, ReferenceStore, RefTiming, short_loop
from .seeds import derive
from .stats import Round, fast_phase, few_fast, pooled_ratio, quantile, summarize
from .verdict import CheckOutcome, Evidence, TimedVerification
from .workers import WorkerGone, WorkerHandle, judge_timed

INIT_TIMEOUT_S = 600.0
JUDGE_ROUNDS = 20
STAGES = {"setup": "constructing ModelNew", "check": "forward", "time": "forward during timing",
          "judge_timed": "forward during clock cross-check", "graph": "CUDA graph capture", "load": "import",
          "log": "worker", "init": "worker start-up"}


class CandidateFailure(Exception):
    def __init__(self, message: str, cuda_error: bool = False, bad_output: str | None = None):
        super().__init__(message)
        self.cuda_error = cuda_error
        self.bad_output = bad_output


@dataclass
class LaneContext:
    """What one lane needs to spawn and drive candidate workers."""

    index: int
    plan: object
    store: ReferenceStore
    ref: ReferenceRunner
    timings: dict[str, RefTiming]
    calibration: verdict.Calibration
    scratch: Path
    log_dir: Path
    device_name: str
    cores: list[int] | None = None
    poison_bytes: int = 0
    gate: object = None
    turn: DeviceTurn = field(default_factory=DeviceTurn)
    keep: Callable[[str, bytes], Path] | None = None
    fastest_launch_us: float | None = None  # the lowest empty-launch median the lane has timed: the fast phase


@contextlib.contextmanager
def seconds_into(seconds: dict[str, float], name: str):
    """Add the block's wall seconds to seconds[name]: where a record's stages or a lane's steps spend time."""
    t0 = time.monotonic()
    try:
        yield
    finally:
        seconds[name] = seconds.get(name, 0.0) + time.monotonic() - t0


class SparePool:
    """Initialized candidate workers kept ready (up to `size`, started in parallel), so a new candidate starts
    with no wait on torch's import. With one, a candidate evaluated faster than a worker imports torch
    waited for the next (2.3-3.3 s of worker start per candidate on the CPU machine).

    make(register) starts one and calls register(handle) as soon as its process exists, so close() can kill
    spares still starting instead of waiting for their start-up (torch's import, a CUDA context)."""

    def __init__(self, make: Callable[[Callable[[object], None]], WorkerHandle | None], size: int = 1,
                 needed: int | None = None):
        self.make = make
        self.size = max(1, size)
        self.needed = needed
        self.lock = threading.Lock()
        self.slots: list[tuple[threading.Thread, list, list]] = []

    def _start(self) -> None:
        box: list = [None]
        spawned: list = []

        def fill() -> None:
            box[0] = self.make(spawned.append)

        t = threading.Thread(target=fill, daemon=True)
        t.start()
        self.slots.append((t, box, spawned))

    def prime(self, limit: int | None = None) -> None:
        """Start spares up to the pool's size, or up to `limit` (fewer at the run's start, where each more
        import of torch slows the reference's), and never more than the takes still `needed` (the candidates
        left): a spare started for no one imports torch beside timed records for nothing (a one-candidate run;
        a batch's last records). A worker discarded mid-candidate takes one more; when none is left, take()
        starts one."""
        with self.lock:
            cap = min(n for n in (self.size, limit, self.needed) if n is not None)
            while len(self.slots) < cap:
                self._start()

    def take(self) -> WorkerHandle | None:
        """The first spare that is ready, else the oldest once it is (a spare can wait long for the device's
        turn while another, started later, is ready)."""
        with self.lock:
            if not self.slots:
                self._start()
            if self.needed is not None:
                self.needed = max(0, self.needed - 1)
            ready = [k for k, (t, _, _) in enumerate(self.slots) if not t.is_alive()]
            t, box, _ = self.slots.pop(ready[0] if ready else 0)
        t.join()
        self.prime()
        return box[0]

    def close(self) -> None:
        """Every spare's processes killed at once, then reaped: ready or still starting, none is waited for
        one by one."""
        with self.lock:
            slots, self.slots = self.slots, []
        for _, _, spawned in slots:
            for h in spawned:
                h.stop()
        for t, box, _ in slots:
            t.join()
            if box[0] is not None:
                box[0].kill()


class CandidateEvaluation:
    def __init__(self, lane: LaneContext, cand: Candidate, build: BuildResult, spares: SparePool,
                 static_errors: list[str], static_warnings: list[str], tampered: Callable[[], list[str]]):
        self.lane = lane
        self.plan = lane.plan
        self.cand = cand
        self.build = build
        self.spares = spares
        self.static_errors = static_errors
        self.static_warnings = static_warnings
        self.tampered = tampered
        self.worker: WorkerHandle | None = None
        self.patched: set[str] = set()
        self.log = lane.log_dir / f"{safe_name(cand.name)}.log"
        self.token = secrets.token_hex(6)
        self.phases: dict[str, float] = {}
        self.worker_s: dict[str, float] = {}

    # -- worker plumbing -------------------------------------------------------------------
    def _phase(self, name: str):
        """Wall seconds per stage of a shape, for the record: where an evaluation's time goes."""
        return seconds_into(self.phases, name)

    def _ask(self, cmd: str, deadline: float, **args) -> dict:
        assert self.worker is not None
        with self.lane.gate.shared(), self.lane.turn.around(cmd):
            reply = self.worker.request(cmd, deadline - time.monotonic(), **args)
        self.worker_s[cmd] = self.worker_s.get(cmd, 0.0) + reply.get("worker_s", 0.0)
        self.patched.update(reply.get("patched") or [])
        if not reply.get("ok"):
            if reply.get("bad_output"):
                raise CandidateFailure(reply.get("message", ""), bad_output=reply["bad_output"])
            if reply.get("harness_error"):
                raise CandidateFailure(f"harness: {reply.get('message', '')}")
            where = STAGES.get(cmd, cmd)
            raise CandidateFailure(f"{where}: {reply.get('message', 'failed')}", bool(reply.get("cuda_error")))
        return reply

    def _discard(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def _start_worker(self) -> None:
        """A spare worker (`worker_wait`: how long no spare was ready), then the candidate's import in it
        (`worker_load`)."""
        with self._phase("worker_wait"):
            w = self.spares.take()
        if w is None or not w.alive:
            raise CandidateFailure("could not start a worker process")
        self.worker = w
        with self._phase("worker_load"):
            self._load()

    def _load(self) -> None:
        deadline = time.monotonic() + self.plan.config.timeouts.load_s
        self.worker.give_log(self.log)
        self._ask("log", deadline, path=str(self.log))
        roots = {"cache_dir": self.build.ext_root} if self.build is not None and self.build.ext_root else {}
        try:
            self._ask("load", deadline, path=str(self.cand.copy_path), cores=self.lane.cores,
                      poison_bytes=self.lane.poison_bytes, **roots)
        except CandidateFailure as e:
            if e.bad_output:
                raise
            raise CandidateFailure(str(e), e.cuda_error) from None
        except WorkerGone as g:
            raise WorkerGone(g.kind, f"while importing: {g}") from None

    # -- per shape ---------------------------------------------------------------------------
    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def evaluate_shape(self, shape: Shape) -> Record:
        t0 = time.monotonic()
        self.phases, self.worker_s = {}, {}
        self.lane.turn.open_to_spares(True)
        ev = Evidence(device=self.plan.device, static_errors=self.static_errors,
                      static_warnings=self.static_warnings, static_policy=self.plan.static_policy,
                      calibration=self.lane.calibration)
        ref = self.lane.store.get(shape.name)
        ref_t = self.lane.timings.get(shape.name, RefTiming())
        ev.floor_launch_us = ref_t.floor_launch.median_us if ref_t.floor_launch else None
        ev.min_bytes = ref.min_bytes
        if ref.error:
            ev.reference_error = ref.error
        else:
            try:
                if self.worker is None:
                    self._start_worker()
                self._shape(shape, ev, ref)
            except WorkerGone as g:
                ev.failure = ("timeout" if g.kind == "timeout" else "runtime_error",
                              f"{'time limit' if g.kind == 'timeout' else 'crash'}: {g}")
                self.worker = None
            except CandidateFailure as e:
                if e.bad_output:
                    ev.bad_output = (e.bad_output, str(e))
                else:
                    ev.failure = ("runtime_error", str(e))
                if e.cuda_error or e.bad_output == "no_modelnew":
                    self._discard()
        ev.patched = set(self.patched)
        ev.tampered = self.tampered()
        return self._record(shape, ev, ref, ref_t, time.monotonic() - t0)

    def _tol_for(self, dtype: str):
        return self.plan.config.check.tolerance_for(dtype)

    def _read_outputs(self, reply: dict, prefix: str) -> list[tuple[dict, object]]:
        return [(m, read_output_file(dict(m, file=f"{prefix}.{i}.bin"))) for i, m in enumerate(reply.get("outputs") or [])]

    def _check(self, shape: Shape, ev: Evidence, ref, seed: int, phase: str, deadline: float,
               first: bool) -> CheckOutcome:
        prefix = str(self.worker.own_folder(self.lane.scratch) / f"out-{self.token}")
        reply = self._ask("check", deadline, seed=seed, out_prefix=prefix)
        try:
            cand = self._read_outputs(reply, prefix)
        except (OSError, ValueError) as e:
            raise CandidateFailure(f"output could not be read back: {e}") from None
        cmp = compare_outputs(ref.outputs[seed], cand, self._tol_for, self.plan.device)
        replay_of = None
        if not cmp.ok and cmp.kind in ("mismatch", "uninitialized_output"):
            for other, outs in ref.outputs.items():
                if other != seed and same_as(outs, cand, self._tol_for):
                    replay_of = other
                    break
        threads = reply.get("threads") or [0, 0]
        if not cmp.ok and replay_of is None and reply.get("reused_output"):
            replay_of = -1
        outcome = CheckOutcome(
            seed=seed, phase=phase, comparison=cmp, replay_of=replay_of,
            late_write=bool(reply.get("late_write")), aliases_input=bool(reply.get("aliases_input")),
            input_mutated=reply.get("input_fps") != ref.input_fps[seed],
            deterministic_kept=bool(reply.get("deterministic_kept", True)),
            thread_growth=(not first) and threads[1] > threads[0],
            extra_py_threads=list(reply.get("extra_py_threads") or []))
        ev.checks.append(outcome)
        return outcome

    def _verify_timed(self, shape: Shape, batches: list[tuple[int, dict, int]], projection: bool,
                      tols, must: list[tuple[int, int]] = ()) -> list[TimedVerification]:
        """Fingerprint the timed calls `must` (batch, call) and a random sample of the others of every batch
        (base seed, calls, call count), numbered across batches, against the reference's answers for the
        same inputs."""
        eligible = [(b, i) for b, (_, calls, n) in enumerate(batches) for i in range(n) if calls.get(str(i)) != OVERWRITTEN]
        chosen = set(must) & set(eligible)
        rest = [c for c in eligible if c not in chosen]
        k = min(self.plan.config.check.verify_timed, len(rest))
        sample = sorted(chosen | set(secrets.SystemRandom().sample(rest, k)))
        seeds = {(b, i): derive(batches[b][0], i) for b, i in sample}
        fps = self.lane.ref.fingerprints(self.lane.store, shape, list(seeds.values()), projection)
        offsets = [sum(n for _, _, n in batches[:b]) for b in range(len(batches))]
        out = []
        for b, i in sample:
            mine = batches[b][1].get(str(i))
            want = fps[seeds[(b, i)]]
            if not isinstance(mine, list) or len(mine) != 3:
                out.append(TimedVerification(offsets[b] + i, seeds[(b, i)], ok=False))
                continue
            ok = fingerprint_matches(want, mine, tols)
            replay = not ok and self._replayed(shape, batches, b, i, mine[0], projection)
            out.append(TimedVerification(offsets[b] + i, seeds[(b, i)], ok=ok, replay=replay,
                                         input_mutated=mine[2] != want[2]))
        return out

    def _timed_rounds(self, shape: Shape, ev: Evidence, projection: bool, deadline: float) -> list[tuple[int, dict]]:
        """The candidate's timed calls in `timing.rounds` rounds, each followed by short timings (a quarter of
        the round's budget each) of the eager reference, an empty launch (the host's phase, for the record)
        and the copy floor on the same device, with the candidate's processes stopped meanwhile: both sides of
        a speedup are timed in alternation, within a second of each other (stats.pooled_ratio). Returns each
        round's base seed and reply."""
        plan, tim = self.plan, self.plan.config.timing
        self.lane.turn.open_to_spares(False)
        n = tim.rounds
        base = plan.time_seed(shape.name)
        ref_t = self.lane.timings.get(shape.name, RefTiming())
        pair = n > 1 and ref_t.eager is not None
        floors = [x for x in (self.lane.fastest_launch_us, ref_t.floor_launch.median_us if ref_t.floor_launch else None)
                  if x is not None]
        ev.lane_launch_us = min(floors) if floors else None
        batches: list[tuple[int, dict]] = []
        rounds: list[Round] = []

        def wanted(k: int) -> bool:
            """The configured rounds, then extra ones while the host's phase asks for them."""
            return k < n or (pair and k < n + tim.phase_extra_rounds
                             and (verdict.slow_phase(rounds, ev.lane_launch_us)
                                  or few_fast(rounds, tim.phase_slack, min(tim.phase_min_rounds, n))))

        for k in itertools.count():
            if not wanted(k):
                break
            base_k = base if k == 0 else derive(base, "round", k)
            loop = round_loop(loop_settings(plan), k, n)
            with self._phase("timing"):
                r = self._ask("time", deadline, base_seed=base_k, loop=loop, verify=True, projection=projection)
            batches.append((base_k, r))
            if not pair:
                continue
            try:
                with self._phase("reference rounds"), self.worker.frozen():
                    paired = self.lane.ref.time_round(shape, derive(base, "reference round", k),
                                                      dict(loop, budget_s=loop["budget_s"] / 4), ev.min_bytes)
            except (RuntimeError, WorkerGone):
                pair, rounds = False, []
                continue
            rounds.append(dataclasses.replace(paired, candidate=tuple(r["device_us"])))
        launches = [r.launch_median for r in rounds if r.launch]
        if launches:
            self.lane.fastest_launch_us = min(launches + floors)
        ev.rounds = rounds
        ev.floor_launch_us = paired_launch_floor(rounds, ev.floor_launch_us)
        ev.times_file = self._keep_raw(shape, rounds)
        return batches

    def _keep_raw(self, shape: Shape, rounds: list[Round]) -> str | None:
        """Every timed call of every round, beside the records: the figures a speedup was computed from."""
        if not rounds or self.lane.keep is None:
            return None
        name = f"{safe_name(self.cand.name)}.{safe_name(shape.name)}.json"
        try:
            return str(self.lane.keep(name, json.dumps([dataclasses.asdict(r) for r in rounds]).encode()))
        except OSError:
            return None

    def _replayed(self, shape: Shape, batches: list[tuple[int, dict, int]], b: int, i: int, got: list,
                  projection: bool) -> bool:
        """A wrong timed output that is the right answer for another input the candidate has seen (a check
        seed, the previous call, or another timed call of any batch that returned the same output: a replay's
        source is often in an earlier round) is a replay."""
        others = self.plan.check_seeds(shape.name) + [self.plan.post_seed(shape.name)]
        others += [derive(base, int(j)) for c, (base, calls, _) in enumerate(batches) for j, fp in calls.items()
                   if (c, int(j)) != (b, i) and isinstance(fp, list) and fp[0] == got][:8]
        if i > 0:
            others.append(derive(batches[b][0], i - 1))
        fps = self.lane.ref.fingerprints(self.lane.store, shape, others, projection)
        return any(fps[s][0] == got for s in others)

    def _shape(self, shape: Shape, ev: Evidence, ref) -> None:
        plan = self.plan
        deadline = time.monotonic() + plan.config.timeouts.shape_s
        with self._phase("setup"):
            self._ask("setup", deadline, params=dict(shape.params), init_seed=plan.init_seed(shape.name))
        with self._phase("checks"):
            for k, seed in enumerate(plan.check_seeds(shape.name)):
                outcome = self._check(shape, ev, ref, seed, "check", deadline, first=(k == 0))
                if not outcome.comparison.ok or verdict.integrity_flags(ev):
                    return
        dtypes = ref.out_dtypes()
        tols = [self._tol_for(d) for d in dtypes]
        projection = not all(t.exact for t in tols)
        batches = self._timed_rounds(shape, ev, projection, deadline)
        replies = [r for _, r in batches]
        dev = [x for r in replies for x in r["device_us"]]
        host = [x for r in replies for x in r["host_us"]]
        span = [x for r in replies for x in r["span_us"]]
        if not dev:
            raise CandidateFailure("timing returned no samples")
        ev.timing = summarize(dev)
        if plan.device == "cuda":
            ev.host_gap_us = statistics.median(h - s for h, s in zip(host, span))
            ev.device_exceeds_host = statistics.median(dev) > 1.05 * statistics.median(host) + 5.0
        ev.timing_thread_growth = any(before < after for before, after in (r.get("threads") or [0, 0] for r in replies))
        ev.timing_py_threads = sorted({t for r in replies for t in (r.get("extra_py_threads") or [])})
        with self._phase("verify"):
            ev.timed = self._verify_timed(shape, [(base, r.get("calls") or {}, int(r.get("unsampled", 0)) + len(r["device_us"]))
                                                  for base, r in batches], projection, tols,
                                          must=fast_tail(replies, plan.config.timing.speedup_quantile))
            self._check(shape, ev, ref, plan.post_seed(shape.name), "post", deadline, first=False)
        with self._phase("judge_clock"):
            ev.judge_call_us = self._judge_clock(plan.judge_seed(shape.name), JUDGE_ROUNDS, deadline, freeze=False)
            if ev.judge_call_us is not None and verdict.timer_contradicts(ev.timing.median_us, ev.judge_call_us):
                again = self._judge_clock(derive(plan.judge_seed(shape.name), "again"), 2 * JUDGE_ROUNDS, deadline,
                                          freeze=True)
                if again is not None:
                    ev.judge_call_us = min(ev.judge_call_us, again)
        if plan.device == "cuda" and plan.config.timing.graph:
            with self._phase("graph"):
                self._graph(shape, ev, projection, tols, deadline)

    def _judge_clock(self, seed: int, rounds: int, deadline: float, freeze: bool) -> float | None:
        """Per-call time on the judge's clock: the fastest call round trip less the fastest no-op one.
        Before a mismatch can accuse a candidate it is measured again with every build paused (freeze):
        on a busy host the judge's wake-ups alone can add milliseconds to every round."""
        with self.lane.gate.shared(), self.lane.turn(), (builds_frozen() if freeze else contextlib.nullcontext()):
            calls, noops = judge_timed(self.worker, seed, rounds, deadline - time.monotonic())
        return max(min(calls) - min(noops), 0.0) if calls and noops else None

    def _graph(self, shape: Shape, ev: Evidence, projection: bool, tols, deadline: float) -> None:
        base = self.plan.graph_seed(shape.name)
        try:
            g = self._ask("graph", deadline, base_seed=base, loop=short_loop(loop_settings(self.plan)), projection=projection)
        except CandidateFailure as e:
            ev.graph_message = f"graph capture failed: {e}"
            if e.cuda_error:
                self._discard()
            return
        except WorkerGone as e:
            ev.graph_message = f"graph capture failed: {e}"
            self.worker = None
            return
        if not g.get("graph_ok"):
            ev.graph_message = g.get("message", "graph capture failed")
            self._discard()  # a failed capture leaves torch's CUDA RNG unusable in that process
            return
        n = int(g.get("unsampled", 0)) + len(g["device_us"])
        checks = self._verify_timed(shape, [(base, g.get("calls") or {}, n)], projection, tols)
        if all(c.ok for c in checks):
            ev.graph = summarize(g["device_us"])
        else:
            ev.graph_message = "graph replays gave wrong outputs (work outside the captured stream?)"

    # -- record ------------------------------------------------------------------------------
    @staticmethod
    def _speedup_compile(eager_speedup: float | None, ref_t: RefTiming, t) -> float | None:
        """Against torch.compile: chained through the eager speedup from rounds where there is one (the compiled
        and eager references were timed back to back by the lane), else compiled median / candidate median."""
        if ref_t.compiled is None or t is None:
            return None
        if eager_speedup is not None and ref_t.eager is not None:
            return eager_speedup * ref_t.eager.median_us / ref_t.compiled.median_us
        return ref_t.compiled.median_us / t.median_us

    def _record(self, shape: Shape, ev: Evidence, ref, ref_t: RefTiming, seconds: float) -> Record:
        d = verdict.decide(ev)
        correct = d.status == "correct"
        t = ev.timing
        plan = self.plan
        metric = plan.config.timing.speedup_metric
        cand_time = (ev.graph.median_us if ev.graph else None) if metric == "gpu_time_us" else (t.median_us if t else None)
        ref_eager = ref_t.eager.median_us if ref_t.eager else None
        ref_metric = (ref_t.graph.median_us if ref_t.graph else None) if metric == "gpu_time_us" else ref_eager
        ref_compiled = ref_t.compiled.median_us if ref_t.compiled else None
        q = plan.config.timing.speedup_quantile
        kept = fast_phase(ev.rounds, plan.config.timing.phase_slack)
        fast = [r for r, k in zip(ev.rounds, kept) if k]
        cand_calls = [r.candidate for r in fast]
        pooled = pooled_ratio([r.reference for r in fast], cand_calls, q) if metric == "time_us" and correct else None
        copy_ratio = pooled_ratio(cand_calls, [r.copy for r in fast], q) if correct else None
        floor_copy = ref_t.floor_copy.median_us if ref_t.floor_copy else None
        if fast:
            ref_eager = summarize([x for r in fast for x in r.reference]).median_us
            copies = [x for r in fast for x in r.copy]
            floor_copy = summarize(copies).median_us if copies else floor_copy
        if copy_ratio is None and correct and t and floor_copy:
            copy_ratio = t.median_us / floor_copy
        cmps = [c.comparison for c in ev.checks]
        max_abs = max((c.max_abs_err for c in cmps if c.max_abs_err is not None), default=None)
        max_rel = max((c.max_rel_err for c in cmps if c.max_rel_err is not None), default=None)
        bw = ev.min_bytes / t.median_us / 1e3 if (t and ev.min_bytes and t.median_us > 0) else None
        copy = self.lane.calibration.copy_gbps if self.lane.calibration else None
        return Record(
            solution=self.cand.name, problem=plan.problem.name, shape=shape.name, status=d.status,
            speedup=pooled if pooled is not None else (
                (ref_metric / cand_time) if correct and ref_metric and cand_time else None),
            speedup_compile=self._speedup_compile(pooled, ref_t, t) if correct else None,
            speedup_rounds=len(fast) if pooled is not None else None,
            rounds=[r.medians() | {"kept": k} for r, k in zip(ev.rounds, kept)] or None,
            times_file=ev.times_file,
            time_us=t.median_us if t else None, gpu_time_us=ev.graph.median_us if ev.graph else None,
            ref_time_us=ref_eager, ref_compile_time_us=ref_compiled,
            ref_gpu_time_us=ref_t.graph.median_us if ref_t.graph else None,
            floor_launch_us=ev.floor_launch_us, lane_launch_us=ev.lane_launch_us,
            floor_read_us=ref_t.floor_read.median_us if ref_t.floor_read else None,
            floor_copy_us=floor_copy, copy_ratio=copy_ratio,
            max_abs_err=max_abs, max_rel_err=max_rel,
            first_mismatch=list(d.comparison.first_mismatch) if d.comparison and d.comparison.first_mismatch else None,
            flags=list(d.flags), message=d.message, seed=d.failing_seed,
            timing=t.to_json() if t else None, bytes_min=ev.min_bytes or None,
            bandwidth_gbps=bw if correct else None,
            bandwidth_frac=(bw / copy) if correct and bw and copy else None,
            device=self.lane.device_name, lane=self.lane.index, solution_path=str(self.cand.path),
            log=str(self.log), eval_seconds=seconds, phase_seconds={k: round(v, 3) for k, v in self.phases.items()},
            worker_seconds={k: round(v, 3) for k, v in self.worker_s.items()},
        )


def paired_launch_floor(rounds: list[Round], fallback: float | None) -> float | None:
    """The empty launch's median over the rounds that paired it with the candidate's calls, else the reference's
    one-off floor: `launch_bound` compares the candidate with a launch timed in the same host phases. The host's
    launch time moves between phases (23-28 against 43-59 us, sixth session), and a floor timed once, seconds
    earlier, may sit in another one."""
    launches = [x for r in rounds for x in r.launch]
    return summarize(launches).median_us if launches else fallback


FAST_TAIL_MAX = 256


def fast_tail(replies: list[dict], q: float) -> list[tuple[int, int]]:
    """The timed calls (batch, call) at or under twice the speedup's quantile, fastest first: a speedup read
    at a low quantile rests on the fastest calls, so every one of them is verified, not a random sample that
    a candidate wrong on one call in eight would pass one time in eight. At most FAST_TAIL_MAX, or more when
    that many would not reach past the quantile itself."""
    timed = sorted((us, b, i) for b, r in enumerate(replies)
                   for us, i in zip(r["device_us"], r.get("sample_calls") or []))
    if not timed:
        return []
    limit = quantile([us for us, _, _ in timed], min(2 * q, 0.5))
    cap = max(FAST_TAIL_MAX, math.ceil(q * len(timed)) + 1)
    return [(b, i) for us, b, i in timed if us <= limit][:cap]


def round_loop(loop: dict, k: int, n: int) -> dict:
    """Round k of n: a 1/n share of the budget and runs, the same precision overall; only the first round
    warms up for the full warm-up time (the model is warm after it)."""
    min_runs = max(5, -(-loop["min_runs"] // n))
    return dict(loop, budget_s=loop["budget_s"] / n, min_runs=min_runs, max_runs=max(min_runs, -(-loop["max_runs"] // n)),
                target_rse=loop["target_rse"] * n ** 0.5,
                warmup_ms=loop["warmup_ms"] if k == 0 else min(loop["warmup_ms"], 5.0))


def loop_settings(plan) -> dict:
    t = plan.config.timing
    return {"warmup_ms": t.warmup_ms, "min_runs": t.min_runs, "max_runs": t.max_runs, "budget_s": t.budget_s,
            "target_rse": t.target_rse, "quantile": t.speedup_quantile}


def safe_name(name: str) -> str:
    """A solution name as a file name (logs)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def static_only_records(plan, cand: Candidate, shapes: list[Shape], ev_kwargs: dict, build: BuildResult | None,
                        lane_device: str) -> list[Record]:
    """Records for a candidate that never runs: rejected by static checks, or failed to build."""
    out = []
    for shape in shapes:
        ev = Evidence(device=plan.device, static_policy=plan.static_policy, **ev_kwargs)
        if build is not None and build.status == "compile_error":
            ev.failure = ("compile_error", build.message)
        elif build is not None and build.status == "timeout":
            ev.failure = ("build_timeout", build.message)
        d = verdict.decide(ev)
        out.append(Record(solution=cand.name, problem=plan.problem.name, shape=shape.name, status=d.status,
                          flags=list(d.flags), message=d.message, device=lane_device,
                          solution_path=str(cand.path), log=build.log if build else ""))
    return out

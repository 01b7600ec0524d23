"""Evaluate one candidate on one lane: drive its worker, gather evidence, hand it to the verdict. Per shape:
checks on fresh seeds (outputs compared here, in the judge), timed calls in rounds paired with the reference, a
sample of them verified by fingerprint after the fact, one more full check after timing, the judge's own clock,
then CUDA-graph replay. A worker that dies, hangs or hits a CUDA error is discarded; the next shape starts anew."""

import dataclasses
import json
import secrets
import statistics
import time

from ..protocol import OVERWRITTEN
from ..seeds import derive
from ..settings import Shape
from ..stats import Round, quantile, summarize
from . import static_checks, verdict
from .builds import BuildResult, Candidate
from .compare import compare_outputs, fingerprint_matches, read_output_file, same_as
from .evidence import CheckOutcome, Evidence, TimedVerification
from .figures import make_record
from .processes import WorkerGone, WorkerHandle, judge_timed
from .profile import seconds_into
from .records import Record
from .reference import RefTiming

JUDGE_ROUNDS = 20
POISON_BYTES = 4 * 2**30
STAGES = {"setup": "constructing ModelNew", "check": "forward", "time": "forward during timing",
          "graph": "CUDA graph capture", "load": "import", "log": "worker", "kernels": "forward under the profiler"}


class CandidateFailure(Exception):
    def __init__(self, message: str, cuda_error: bool = False, bad_output: str | None = None):
        super().__init__(message)
        self.cuda_error = cuda_error
        self.bad_output = bad_output


def safe_name(name: str) -> str:
    """A solution name as a file name (logs)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


class CandidateEvaluation:
    def __init__(self, lane, cand: Candidate, build: BuildResult, spares, static: tuple[list[str], list[str]]):
        self.lane = lane
        self.plan = lane.plan
        self.cand = cand
        self.build = build
        self.spares = spares
        self.static_errors, self.static_warnings = static
        self.worker: WorkerHandle | None = None
        self.patched: set[str] = set()
        self.log = lane.log_dir / f"{safe_name(cand.name)}.log"
        self.token = secrets.token_hex(6)
        self.tol_for = self.plan.config.check.tolerance_for
        self.kernels = static_checks.defined_kernels(cand.source, cand.path.parent) if self.plan.device == "cuda" \
            else frozenset()
        self.own_kernels: bool | None = None
        self.probed = False

    # -- worker plumbing -------------------------------------------------------------------
    def _ask(self, cmd: str, deadline: float, **args) -> dict:
        with self.lane.tamper.gate.shared(), self.lane.ref.turn.around(cmd):
            try:
                reply = self.worker.request(cmd, deadline - time.monotonic(), **args)
            except WorkerGone as g:
                if g.kind != "timeout":
                    raise
                key = "load_s" if cmd in ("log", "load") else "shape_s"
                raise WorkerGone("timeout", f"{STAGES.get(cmd, cmd)}: no answer within the time limit "
                                 f"(timeouts.{key}: {getattr(self.plan.config.timeouts, key):g} s)") from None
        self.worker_s[cmd] = self.worker_s.get(cmd, 0.0) + reply.get("worker_s", 0.0)
        self.patched.update(reply.get("patched") or [])
        if not reply.get("ok"):
            if reply.get("bad_output"):
                raise CandidateFailure(reply.get("message", ""), bad_output=reply["bad_output"])
            if reply.get("harness_error"):
                raise CandidateFailure(f"harness: {reply.get('message', '')}")
            raise CandidateFailure(f"{STAGES.get(cmd, cmd)}: {reply.get('message', 'failed')}", bool(reply.get("cuda_error")))
        return reply

    def _start_worker(self) -> None:
        """A spare worker, then the candidate's import in it (from its own folder of the cache under --isolate)."""
        with seconds_into(self.stages, "worker_wait"):
            w = self.spares.take()
        if w is None or not w.alive:
            raise CandidateFailure("could not start a worker process")
        self.worker = w
        with seconds_into(self.stages, "worker_load"):
            deadline = time.monotonic() + self.plan.config.timeouts.load_s
            w.give_log(self.log)
            self._ask("log", deadline, path=str(self.log))
            try:
                self._ask("load", deadline, path=str(self.cand.copy_path), cores=self.lane.cores,
                          poison_bytes=POISON_BYTES if self.plan.device == "cuda" else 0, cache_dir=self.build.ext_root,
                          sandbox=self.lane.sandbox)
            except WorkerGone as g:
                raise WorkerGone(g.kind, f"while importing: {g}") from None

    def close(self, kill: bool = False) -> None:
        """Let the worker go (killed: one that may be unusable, after a CUDA error or a failed capture)."""
        if self.worker is not None:
            (self.worker.kill if kill else self.worker.close)()
            self.worker = None

    # -- per shape ---------------------------------------------------------------------------
    def evaluate_shape(self, shape: Shape) -> Record:
        t0 = time.monotonic()
        self.stages: dict[str, float] = {}  # this shape's wall seconds, by stage
        self.worker_s: dict[str, float] = {}  # and its worker commands' own seconds
        self.lane.ref.turn.open_to_spares(True)
        ref = self.lane.store.get(shape.name)
        ref_t = self.lane.timings.get(shape.name, RefTiming())
        ev = Evidence(device=self.plan.device, static_errors=self.static_errors, static_warnings=self.static_warnings,
                      static_policy=self.plan.static_policy, min_bytes=ref.min_bytes, cache_bytes=self.lane.cache_bytes,
                      empty_gap_us=ref_t.empty_gap_us, reference_error=ref.error)
        self._floors(ev, [m.median_us for m in [ref_t.floor_launch] if m],
                     [m.median_us for m in [ref_t.floor_copy] if m])
        if not ref.error:
            try:
                if self.worker is None:
                    self._start_worker()
                self._shape(shape, ev, ref)
            except WorkerGone as g:
                ev.failure = ("timeout" if g.kind == "timeout" else "runtime_error",
                              f"{'time limit' if g.kind == 'timeout' else 'crash'}: {g}")
                self.close(kill=True)
            except CandidateFailure as e:
                if e.bad_output:
                    ev.bad_output = (e.bad_output, str(e))
                else:
                    ev.failure = ("runtime_error", str(e))
                if e.cuda_error or e.bad_output == "no_modelnew":
                    self.close(kill=True)
        ev.own_kernels = self.own_kernels
        ev.patched = set(self.patched)
        ev.tampered = self.lane.tamper.tampered_by(self.cand.name)
        profile = {"eval_seconds": round(time.monotonic() - t0, 3),
                   "stage_seconds": {k: round(v, 3) for k, v in self.stages.items()},
                   "worker_seconds": {k: round(v, 3) for k, v in self.worker_s.items()}} if self.plan.profile else None
        return make_record(self.plan, self.lane, self.cand, shape, ev, ref_t, str(self.log),
                           self.keep_raw(shape, ev.rounds), profile)

    def _check(self, ev: Evidence, ref, seed: int, phase: str, deadline: float, first: bool) -> CheckOutcome:
        prefix = str(self.worker.own_folder(self.lane.scratch) / f"out-{self.token}")
        reply = self._ask("check", deadline, seed=seed, out_prefix=prefix)
        try:
            cand = [(m, read_output_file(dict(m, file=f"{prefix}.{i}.bin"))) for i, m in enumerate(reply.get("outputs") or [])]
        except (OSError, ValueError) as e:
            raise CandidateFailure(f"output could not be read back: {e}") from None
        cmp = compare_outputs(ref.outputs[seed], cand, self.tol_for, self.plan.device)
        replay_of = None
        if not cmp.ok and cmp.kind in ("mismatch", "uninitialized_output"):
            replay_of = next((o for o, outs in ref.outputs.items() if o != seed and same_as(outs, cand, self.tol_for)), None)
        if not cmp.ok and replay_of is None and reply.get("reused_output"):
            replay_of = -1
        threads = reply.get("threads") or [0, 0]
        outcome = CheckOutcome(
            seed=seed, phase=phase, comparison=cmp, replay_of=replay_of, late_write=bool(reply.get("late_write")),
            aliases_input=bool(reply.get("aliases_input")), input_mutated=reply.get("input_fps") != ref.input_fps[seed],
            deterministic_kept=bool(reply.get("deterministic_kept", True)),
            thread_growth=(not first) and threads[1] > threads[0],
            extra_py_threads=tuple(reply.get("extra_py_threads") or ()))
        ev.checks.append(outcome)
        return outcome

    def _verify_timed(self, shape: Shape, replies: list[tuple[int, dict]], projection: bool, tols,
                      must: list[tuple[int, int]] = ()) -> list[TimedVerification]:
        """Fingerprint the timed calls `must` (batch, call) and a random sample of the others of every batch (base
        seed, reply), numbered across batches, against the reference's answers for the same inputs."""
        batches = [(base, r.get("calls") or {}, int(r.get("unsampled", 0)) + len(r["device_us"]))
                   for base, r in replies]
        eligible = [(b, i) for b, (_, calls, n) in enumerate(batches) for i in range(n) if calls.get(str(i)) != OVERWRITTEN]
        chosen = set(must) & set(eligible)
        rest = [c for c in eligible if c not in chosen]
        sample = sorted(chosen | set(secrets.SystemRandom().sample(rest, min(self.plan.config.check.verify_timed, len(rest)))))
        seeds = {(b, i): derive(batches[b][0], i) for b, i in sample}
        fps = self.lane.ref.fingerprints(self.lane.store, shape, list(seeds.values()), projection)
        offsets = [sum(n for _, _, n in batches[:b]) for b in range(len(batches))]
        out = []
        for b, i in sample:
            mine, want = batches[b][1].get(str(i)), fps[seeds[(b, i)]]
            if not isinstance(mine, list) or len(mine) != 3:
                out.append(TimedVerification(offsets[b] + i, seeds[(b, i)], ok=False))
                continue
            ok = fingerprint_matches(want, mine, tols)
            replay = not ok and self._replayed(shape, batches, b, i, mine[0], projection)
            out.append(TimedVerification(offsets[b] + i, seeds[(b, i)], ok=ok, replay=replay, input_mutated=mine[2] != want[2]))
        return out

    def _replayed(self, shape: Shape, batches: list[tuple[int, dict, int]], b: int, i: int, got: list,
                  projection: bool) -> bool:
        """A wrong timed output that is the right answer for another input the candidate has seen (a check seed,
        the previous call, or another timed call of any batch that returned the same output) is a replay."""
        others = self.plan.check_seeds(shape.name) + [self.plan.post_seed(shape.name)]
        others += [derive(base, int(j)) for c, (base, calls, _) in enumerate(batches) for j, fp in calls.items()
                   if (c, int(j)) != (b, i) and isinstance(fp, list) and fp[0] == got][:8]
        if i > 0:
            others.append(derive(batches[b][0], i - 1))
        fps = self.lane.ref.fingerprints(self.lane.store, shape, others, projection)
        return any(fps[s][0] == got for s in others)

    def _timed_rounds(self, shape: Shape, ev: Evidence, projection: bool, deadline: float) -> list[tuple[int, dict]]:
        """The candidate's timed calls in `timing.rounds` rounds, each followed by short timings (a quarter of the
        round's budget each) of the eager reference, an empty launch and the copy floor, the candidate stopped
        meanwhile: both sides of a speedup timed within a second of each other (stats.pooled_ratio)."""
        plan = self.plan
        self.lane.ref.turn.open_to_spares(False)
        n = plan.config.timing.rounds
        base = plan.time_seed(shape.name)
        pair = n > 1 and self.lane.timings.get(shape.name, RefTiming()).eager is not None
        batches: list[tuple[int, dict]] = []
        for k in range(n):
            base_k = base if k == 0 else derive(base, "round", k)
            loop = plan.loop.round(k, n)
            with seconds_into(self.stages, "timing"):
                r = self._ask("time", deadline, base_seed=base_k, loop=loop.json(), verify=True, projection=projection)
            batches.append((base_k, r))
            if not pair:
                continue
            try:
                with seconds_into(self.stages, "reference rounds"), self.worker.frozen():
                    paired = self.lane.ref.time_round(shape, derive(base, "reference round", k),
                                                      dataclasses.replace(loop, budget_s=loop.budget_s / 4), ev.min_bytes)
            except (RuntimeError, WorkerGone):
                pair, ev.rounds = False, []
                continue
            ev.rounds.append(dataclasses.replace(paired, candidate=tuple(r["device_us"])))
        if ev.rounds:
            self._floors(ev, [x for r in ev.rounds for x in r.launch], [x for r in ev.rounds for x in r.copy])
        return batches

    @staticmethod
    def _floors(ev: Evidence, launches: list[float], copies: list[float]) -> None:
        """The launch floor and the copy bandwidth a record is judged against: the empty launch and the copy of the
        shape's minimum bytes, timed through the candidates' loop, in the record's own rounds where it has them."""
        copy_us = summarize(copies).median_us if copies else None
        ev.floor_launch_us = summarize(launches).median_us if launches else None
        ev.copy_gbps = ev.min_bytes / copy_us / 1e3 if copy_us and ev.min_bytes else None

    def keep_raw(self, shape: Shape, rounds: list[Round]) -> str | None:
        """Every timed call of every round, beside the records: the figures a speedup was computed from."""
        if not rounds:
            return None
        name = f"{safe_name(self.cand.name)}.{safe_name(shape.name)}.json"
        data = json.dumps([dataclasses.asdict(r) for r in rounds]).encode()
        try:
            return str(self.lane.tamper.guard.keep(name, data))
        except OSError:
            return None

    def _shape(self, shape: Shape, ev: Evidence, ref) -> None:
        plan = self.plan
        deadline = time.monotonic() + plan.config.timeouts.shape_s
        with seconds_into(self.stages, "setup"):
            self._ask("setup", deadline, params=dict(shape.params), init_seed=plan.init_seed(shape.name),
                      precision=plan.config.check.precision)
        with seconds_into(self.stages, "checks"):
            for k, seed in enumerate(plan.check_seeds(shape.name)):
                outcome = self._check(ev, ref, seed, "check", deadline, first=(k == 0))
                if not outcome.comparison.ok or verdict.integrity_flags(ev):
                    return
        tols = [self.tol_for(m["dtype"]) for m, _ in next(iter(ref.outputs.values()), [])]
        projection = not all(t.exact for t in tols)
        batches = self._timed_rounds(shape, ev, projection, deadline)
        replies = [r for _, r in batches]
        dev = [x for r in replies for x in r["device_us"]]
        if not dev:
            raise CandidateFailure("timing returned no samples")
        ev.timing = summarize(dev)
        if plan.device == "cuda":
            host = [x for r in replies for x in r["host_us"]]
            span = [x for r in replies for x in r["span_us"]]
            ev.host_gap_us = statistics.median(h - s for h, s in zip(host, span))
            ev.device_exceeds_host = statistics.median(dev) > 1.05 * statistics.median(host) + 5.0
        ev.timing_thread_growth = any(a < b for a, b in (r.get("threads") or [0, 0] for r in replies))
        ev.timing_py_threads = sorted({t for r in replies for t in (r.get("extra_py_threads") or [])})
        with seconds_into(self.stages, "verify"):
            ev.timed = self._verify_timed(shape, batches, projection, tols,
                                          must=verdict.fast_tail(replies, plan.config.timing.speedup_quantile))
            self._check(ev, ref, plan.post_seed(shape.name), "post", deadline, first=False)
        with seconds_into(self.stages, "judge_clock"):
            ev.reported_fast_us = quantile(sorted(dev), plan.config.timing.speedup_quantile)
            base = plan.judge_seed(shape.name)
            first = self._judge_clock(shape, ev, base, projection, tols, deadline)
            if first is not None:
                ev.judge_call_us, ev.judge_noise_us, ev.judge_clock = first
            if verdict.timer_contradicts(ev):
                again = self._judge_clock(shape, ev, derive(base, "again"), projection, tols, deadline, freeze=True)
                if again is not None and again[0] - again[1] < ev.judge_call_us - ev.judge_noise_us:
                    ev.judge_call_us, ev.judge_noise_us, ev.judge_clock = again
        if plan.device == "cuda" and plan.config.timing.graph:
            with seconds_into(self.stages, "graph"):
                self._graph(shape, ev, projection, tols, deadline)
        if self.kernels and not self.probed:
            with seconds_into(self.stages, "kernels"):
                self._probe_kernels(shape, deadline)

    def _probe_kernels(self, shape: Shape, deadline: float) -> None:
        """Whether one forward launches a kernel the candidate defines, as the GPU profiler names its launches;
        once a candidate, after its first shape's timings. Its worker then goes: no later timing runs in a
        process the profiler has attached to. What the watch reports of this call is set aside with that process
        (nothing measured runs there after it), as is a probe that fails or sees no kernel at all."""
        self.probed = True
        patched = set(self.patched)
        try:
            names = self._ask("kernels", deadline, seed=derive(self.plan.post_seed(shape.name), "kernels")).get("kernels")
        except (CandidateFailure, WorkerGone):
            names = None
        self.patched = patched
        if isinstance(names, list) and names and all(isinstance(n, str) for n in names):
            self.own_kernels = static_checks.launched_own_kernel(self.kernels, names)
        self.close(kill=True)

    def _judge_clock(self, shape: Shape, ev: Evidence, base: int, projection: bool, tols, deadline: float,
                     freeze: bool = False) -> tuple[float, float, dict] | None:
        """Per-call time on the judge's clock (processes.judge_timed) and its noise: the fastest verified call
        round trip less the fastest no-op one, the reference worker's no-ops the ceiling of the candidate's
        (which it could slow); the noise is how far the two workers' fastest no-ops, the same work, disagree;
        then the minima behind both, for the record.
        Every call's answer is verified. Before a mismatch can accuse a candidate it is measured again, over twice
        the rounds, with every build paused (freeze): on a busy host the judge's wake-ups alone can add
        milliseconds to every round."""
        rounds = 2 * JUDGE_ROUNDS if freeze else JUDGE_ROUNDS
        try:
            with self.lane.tamper.gate.shared(), self.lane.ref.turn(pause_builds=freeze):
                calls, noops = judge_timed(self.worker, [derive(base, k) for k in range(rounds)], projection,
                                           deadline - time.monotonic())
        except RuntimeError as e:
            raise CandidateFailure(f"forward during the judge's clock: {e}") from None
        ref_calls, ref_noops = [], []
        try:
            with self.worker.frozen():
                ref_calls, ref_noops = self.lane.ref.judge_timed(
                    shape, [derive(base, "reference", k) for k in range(rounds)], projection, pause_builds=freeze)
        except (RuntimeError, WorkerGone):
            pass
        want = self.lane.ref.fingerprints(self.lane.store, shape, [s for _, s, _ in calls], projection)
        verified = []
        for k, (us, seed, fp) in enumerate(calls):
            ok = isinstance(fp, list) and len(fp) == 3 and fingerprint_matches(want[seed], fp, tols)
            ev.timed.append(TimedVerification(k, seed, ok=ok, input_mutated=ok and fp[2] != want[seed][2],
                                              phase="judge's clock"))
            verified += [us] if ok else []
        if not verified or not (noops or ref_noops):
            return None
        minima = {k: round(min(v), 1) if v else None for k, v in (
            ("calls", verified), ("noops", noops), ("ref_calls", [us for us, _, _ in ref_calls]),
            ("ref_noops", ref_noops))}
        noise = abs(min(noops) - min(ref_noops)) if noops and ref_noops else 0.0
        return max(min(verified) - min(noops + ref_noops), 0.0), noise, minima

    def _graph(self, shape: Shape, ev: Evidence, projection: bool, tols, deadline: float) -> None:
        base = self.plan.graph_seed(shape.name)
        try:
            g = self._ask("graph", deadline, base_seed=base, loop=self.plan.loop.short().json(), projection=projection)
        except (CandidateFailure, WorkerGone) as e:
            ev.graph_message = f"graph capture failed: {e}"
            if isinstance(e, WorkerGone) or e.cuda_error:
                self.close(kill=True)
            return
        if not g.get("graph_ok"):
            ev.graph_message = g.get("message", "graph capture failed")
            self.close(kill=True)  # a failed capture leaves torch's CUDA RNG unusable in that process
            return
        if all(c.ok for c in self._verify_timed(shape, [(base, g)], projection, tols)):
            ev.graph = summarize(g["device_us"])
        else:
            ev.graph_message = "graph replays gave wrong outputs (work outside the captured stream?)"

"""Evaluate one candidate on one lane: drive its worker, gather evidence, hand it to the verdict. Per shape, one
loop runs the declared steps (STEPS): setup, checks on fresh seeds (outputs compared here, in the judge), timed
calls in rounds paired with the reference, a re-measure with builds paused where host timing alone looks wrong,
verification of a sample of the timed calls by fingerprint and one more full check, the judge's own clock, then
on the GPU CUDA-graph replay and the kernel probe. Before each step the loop makes sure a live worker holds the
candidate set up for the shape, starting one where a step (a failed capture, the probe) discarded the last. A
worker that dies, hangs or hits a CUDA error ends the shape with a status; an exception of the harness's own
ends it as `harness_error`, its traceback in the candidate's log."""

import dataclasses
import json
import secrets
import time
import traceback

from ..settings import Shape
from ..stats import Round
from . import static_checks, steps
from .builds import BuildResult, Candidate
from .compare import compare_outputs, read_output_file, same_as
from .evidence import CheckOutcome, Evidence
from .figures import make_record
from .processes import WorkerGone, WorkerHandle
from .profile import Stages
from .records import Record, safe_name
from .reference import RefTiming
from .steps import CandidateFailure, ShapeRun, floors

POISON_BYTES = 4 * 2**30
STAGES = {"setup": "constructing ModelNew", "check": "forward", "time": "forward during timing",
          "graph": "CUDA graph capture", "load": "import", "log": "worker", "kernels": "forward under the profiler"}


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
        self.set_up: str | None = None  # the shape the worker is set up for

    # -- worker plumbing -------------------------------------------------------------------
    def ask(self, cmd: str, deadline: float, pause_builds: bool = False, **args) -> dict:
        turn = self.lane.ref.turn(pause_builds=True) if pause_builds else self.lane.ref.turn.around(cmd)
        with self.lane.tamper.gate.shared(), turn:
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
        with self.stages("worker_wait"), self.lane.ref.turn.spares_in(restore=True):
            w = self.spares.take(self.plan.config.timeouts.load_s)
        if w is None or not w.alive:
            raise CandidateFailure("could not start a worker process")
        self.worker = w
        with self.stages("worker_load"):
            deadline = time.monotonic() + self.plan.config.timeouts.load_s
            if not w.use_log(self.log):
                self.ask("log", deadline, path=str(self.log))
            try:
                self.ask("load", deadline, path=str(self.cand.copy_path), cores=self.lane.cores,
                          poison_bytes=POISON_BYTES if self.plan.device == "cuda" else 0, cache_dir=self.build.ext_root,
                          sandbox=w.sandbox(self.lane.sandbox))
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
        self.stages = Stages()  # this shape's wall seconds, by step
        self.worker_s: dict[str, float] = {}  # and its worker commands' own seconds
        self.lane.ref.turn.open_to_spares(True)
        ref = self.lane.store.get(shape.name)
        ref_t = self.lane.timings.get(shape.name, RefTiming())
        ev = Evidence(device=self.plan.device, static_errors=self.static_errors, static_warnings=self.static_warnings,
                      static_policy=self.plan.static_policy, min_bytes=ref.min_bytes, cache_bytes=self.lane.cache_bytes,
                      empty_gap_us=ref_t.empty_gap_us, hidden_us=ref_t.flush_us, reference_error=ref.error)
        floors(ev, [m.median_us for m in [ref_t.floor_launch] if m],
                     [m.median_us for m in [ref_t.floor_copy] if m])
        if not ref.error:
            tols = [self.tol_for(m["dtype"]) for m, _ in next(iter(ref.outputs.values()), [])]
            self._run_steps(ShapeRun(shape, ev, ref, time.monotonic() + self.plan.config.timeouts.shape_s, tols,
                                     projection=not all(t.exact for t in tols)))
        ev.own_kernels = self.own_kernels
        ev.patched = set(self.patched)
        ev.tampered = self.lane.tamper.tampered_by(self.cand.name)
        profile = {"eval_seconds": round(time.monotonic() - t0, 3),
                   "stage_seconds": {k: round(v, 3) for k, v in self.stages.items()},
                   "worker_seconds": {k: round(v, 3) for k, v in self.worker_s.items()}} if self.plan.profile else None
        return make_record(self.plan, self.lane, self.cand, shape, ev, ref_t, str(self.log),
                           self.keep_raw(shape, ev.rounds), profile)

    def _run_steps(self, run: ShapeRun) -> None:
        """The declared steps in order, each given a live worker set up for the shape; the first failure ends
        the shape with its status."""
        ev = run.ev
        step = steps.STEPS[0]
        try:
            for step in steps.STEPS:
                if self.plan.device not in step.devices or (step.when is not None and not step.when(self, run)):
                    continue
                with self.stages(step.name):
                    self._ready(run)
                    if step.run(self, run) is False:
                        return
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
        except Exception as e:  # the harness's own fault: this record says so, the lane goes on
            ev.harness_error = f"{step.name}: {type(e).__name__}: {e}"
            self._log_traceback(f"harness error in step {step.name}")
            self.close(kill=True)

    def _log_traceback(self, what: str) -> None:
        text = f"\n[judge] {what} ({self.cand.name}):\n{traceback.format_exc()}"
        try:
            with open(self.log, "a") as f:
                f.write(text)
        except OSError:
            pass

    def _ready(self, run: ShapeRun) -> None:
        """A live worker with the candidate imported and set up for this shape: a new one where a step discarded
        the last (a failed capture, the probe, a crash on an earlier shape)."""
        if self.worker is None:
            self.set_up = None
            self._start_worker()
        if self.set_up != run.shape.name:
            self.ask("setup", run.deadline, params=dict(run.shape.params),
                      init_seed=self.plan.init_seed(run.shape.name), precision=self.plan.config.check.precision)
            self.set_up = run.shape.name

    def check(self, ev: Evidence, ref, seed: int, phase: str, deadline: float, first: bool) -> CheckOutcome:
        prefix = str(self.worker.folder / f"out-{self.token}")
        reply = self.ask("check", deadline, seed=seed, out_prefix=prefix)
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


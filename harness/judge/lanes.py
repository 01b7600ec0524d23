"""Evaluation lanes: each owns one device (a GPU, or the CPU) with its reference worker, a few candidate workers
started ahead, and a thread that evaluates candidates from the run's queue as their builds finish."""

import contextlib
import math
import queue
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import isolation
from .evaluate import POISON_BYTES, CandidateEvaluation
from .figures import unrun_records
from .guard import TamperWatch
from .processes import WorkerGone, WorkerHandle
from .profile import Profile
from .records import safe_name
from .reference import INIT_TIMEOUT_S, ReferenceRunner, ReferenceStore, RefTiming
from .turns import DeviceTurn

SPARE_WORKERS = 2
"""Candidate workers a lane keeps started ahead where it has cores of its own (one where workers share cores with
timing). A worker is a fork of the fork server: its start and the problem's load take 0.3-0.5 s, its CUDA context
and poisoned block 0.2-0.3 s in the device's turn, against 1.3-3 s for a record; the second covers a worker
discarded mid-candidate. Each idle spare holds a CUDA context and its poisoned block."""


@dataclass
class LaneContext:
    """What one lane needs to start and drive candidate workers."""

    index: int
    plan: object
    store: ReferenceStore
    ref: ReferenceRunner
    scratch: Path
    log_dir: Path
    device_name: str
    cores: list[int] | None
    tamper: TamperWatch
    profile: Profile
    sandbox: dict | None = None
    cache_bytes: int = 0
    timings: dict[str, RefTiming] = field(default_factory=dict)


class SparePool:
    """Candidate workers kept started ahead (up to `size`, started in parallel), so a candidate starts in a ready
    process. make(register) starts one and calls register(handle) as soon as its process exists, so close() can
    kill spares still starting instead of waiting for them."""

    def __init__(self, make: Callable[[Callable[[object], None]], WorkerHandle | None], size: int = 1,
                 needed: int | None = None):
        self.make = make
        self.size = max(1, size)
        self.needed = math.inf if needed is None else needed
        self.lock = threading.Lock()
        self.slots: list[tuple[threading.Thread, list, list]] = []

    def _start(self) -> None:
        box: list = [None]
        spawned: list = []
        t = threading.Thread(target=lambda: box.__setitem__(0, self.make(spawned.append)), daemon=True)
        t.start()
        self.slots.append((t, box, spawned))

    def prime(self) -> None:
        """Start spares up to the pool's size, never more than the candidates still `needed`: a spare started for
        no one holds a device context beside timed records for nothing."""
        with self.lock:
            while len(self.slots) < min(self.size, self.needed):
                self._start()

    def take(self, timeout: float) -> WorkerHandle | None:
        """The first spare that is ready, else the oldest once it is (a spare can wait long for the device's turn
        while another, started later, is ready). One not ready within `timeout` stays in the pool: TimeoutError."""
        with self.lock:
            if not self.slots:
                self._start()
            self.needed = max(0, self.needed - 1)
            ready = [k for k, (t, _, _) in enumerate(self.slots) if not t.is_alive()]
            slot = self.slots.pop(ready[0] if ready else 0)
        slot[0].join(timeout)
        if slot[0].is_alive():
            with self.lock:
                self.slots.insert(0, slot)
            raise TimeoutError(f"no worker process was ready within {timeout:g} s")
        self.prime()
        return slot[1][0]

    def close(self) -> None:
        """Every spare's processes killed at once, then reaped: ready or still starting, none is waited for."""
        with self.lock:
            slots, self.slots = self.slots, []
        for _, _, spawned in slots:
            for h in spawned:
                h.stop()
        for t, box, _ in slots:
            t.join()
            if box[0] is not None:
                box[0].kill()


def spare_maker(plan, repo_root: Path, lane_env: dict, scratch: Path, log: Path, cores: list[int] | None,
                turn: DeviceTurn, holders: int, problem_src: dict, profile: Profile):
    """How a lane starts a spare: the worker, its init with the problem (no device), then its device step in the
    device's turn (a CUDA context, the poisoned block, the first shape's kernels loaded)."""
    init_args = {"role": "candidate", "device": plan.device, "problem_src": problem_src, "fp_seed": plan.fp_seed,
                 "cache_dir": str(plan.cache_dir), "cores": cores, "device_now": False, "env": lane_env,
                 "strict": plan.strict_sandbox}

    def make(register) -> WorkerHandle | None:
        # under --isolate, a worker that imports candidates runs as a user of its own
        w = WorkerHandle(repo_root=repo_root, env=lane_env, log_path=log, cwd=scratch, trusted=False,
                         identity=isolation.new_identity() if plan.isolate else None,
                         strict=plan.strict_sandbox)
        register(w)
        started = profile.now()
        try:
            reply = w.request("init", INIT_TIMEOUT_S, cwd=str(w.folder), **init_args)
            if reply.get("ok"):
                with turn.for_spare(device_step=plan.device == "cuda"):
                    if plan.device == "cuda":
                        reply = w.request("device", INIT_TIMEOUT_S, poison_bytes=POISON_BYTES, holders=holders,
                                          warm_params=dict(plan.shapes[0].params) if plan.shapes else None)
            if not reply.get("ok"):
                w.kill()
                return None
        except WorkerGone:
            return None
        finally:
            profile.spares.append({"forked": w.forked, "started_s": started, "ready_s": profile.now()})
        return w

    return make


def run_lane(ctx: LaneContext, spares: SparePool, work: queue.Queue, todo: dict, static: dict, writer,
             progress: Callable[[str, int], None]) -> None:
    """The reference's work on this lane (outputs on lane 0, timings and floors per shape), then candidates from
    the queue until it yields None, each shape's record written as it is decided. A fault of the harness's own
    becomes that candidate and shape's `harness_error` record (its traceback in the candidate's log, or the
    reference's), and the lane goes on; a fault in the reference's work gives every candidate such records."""
    plan, ref = ctx.plan, ctx.ref
    fault = None
    try:
        try:
            ref.turn.open_to_spares(False)
            for shape in plan.shapes:
                if ctx.index == 0:
                    ctx.store.put(ref.outputs(shape))
                ref_shape = ctx.store.get(shape.name)
                if ref_shape.error is None:
                    ctx.timings[shape.name] = ref.timings(shape, plan.device, ref_shape.min_bytes)
                progress("reference", 1)
            spares.prime()
        except Exception as e:
            fault = f"the reference's work on lane {ctx.index}: {type(e).__name__}: {e}"
            _log_fault(ctx.log_dir / f"reference.lane{ctx.index}.log", fault)
        ref.turn.open_to_spares(True)
        ctx.profile.mark(f"lane{ctx.index}_reference_done")
        while (item := work.get()) is not None:
            cand, build = item
            ctx.profile.mark(f"lane{ctx.index}_first_candidate", once=True)
            left = list(todo[cand.name])
            try:
                if fault:
                    raise LaneFault(fault)
                ev = CandidateEvaluation(ctx, cand, build, spares, static[cand.name])
                with ctx.tamper.evaluation(cand.name), contextlib.closing(ev):
                    while left:
                        try:
                            record = ev.evaluate_shape(left[0])
                        except Exception as e:
                            ev.close(kill=True)
                            record = _fault_record(ctx, cand, left[0], static, e)
                        writer.write(record)
                        left.pop(0)
                        progress("evaluate", 1)
            except Exception as e:
                for shape in left:
                    writer.write(_fault_record(ctx, cand, shape, static, e))
                    progress("evaluate", 1)
    finally:
        ref.turn.open_to_spares(True)  # no spare is left waiting for a window while it is closed
        spares.close()


class LaneFault(Exception):
    """The lane's reference work failed: its candidates get harness_error records."""


def _log_fault(path: Path, what: str) -> None:
    with contextlib.suppress(OSError), open(path, "a") as f:
        f.write(f"\n[judge] harness error: {what}\n{traceback.format_exc()}")


def _fault_record(ctx: LaneContext, cand, shape, static: dict, e: Exception):
    what = str(e) if isinstance(e, LaneFault) else f"{type(e).__name__}: {e}"
    _log_fault(ctx.log_dir / f"{safe_name(cand.name)}.log", what)
    return unrun_records(ctx.plan, cand, [shape], static[cand.name], None, ctx.device_name, fault=what)[0]

"""The run pipeline: plan -> static checks -> builds (pool) -> reference -> evaluation lanes -> records -> report.

Builds run in a process pool while lanes evaluate what is already built; each lane owns one device
(a GPU, or the CPU) with its reference worker and candidate workers. Records are written as they are
decided. The judge's own threads run no candidate code.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from . import forkserver, isolation, report, static_checks
from .build import (
    BuildPool,
    BuildResult,
    HeaderBuild,
    build_env,
    build_nice,
    builds_frozen,
    run_build,
    snapshot_candidate,
    toolchain_id,
)
from .envinfo import gpu_arch_hint, host_info, process_age_s
from .evaluate import (
    INIT_TIMEOUT_S,
    CandidateEvaluation,
    LaneContext,
    SparePool,
    loop_settings,
    safe_name,
    seconds_into,
    static_only_records,
)
from .integrity import TreeGuard
from .plan import Plan
from .records import Record, RecordWriter, read_records
from .reference import DeviceTurn, ReferenceRunner, ReferenceStore, RefTiming
from .workers import EARLY_SPARES, SPARE_WORKERS, WorkerGone, WorkerHandle, take_early

POISON_BYTES = 4 * 2**30
SHM_MIN_FREE = 8 * 2**30


class Runner:
    def __init__(self, plan: Plan, console: Console, repo_root: Path):
        self.plan = plan
        self.console = console
        self.repo_root = repo_root
        self.out = plan.out_dir
        self.logs = self.out / "logs"
        self.store = ReferenceStore()
        self.lock = threading.Lock()
        self.gate = Gate()
        self.turns: dict[str, DeviceTurn] = {}
        self.building: set[str] = set()
        self.evaluating: set[str] = set()
        self.build_args: dict = {}
        self.tamper: dict[str, list[str]] = {}
        self.lane_info: dict[int, dict] = {}
        self.ref_timings: dict[int, dict[str, RefTiming]] = {}
        self.calibrations: dict[int, object] = {}
        self.builds: dict[str, BuildResult] = {}
        self.pch: HeaderBuild | None = None
        self.errors: list[str] = []
        self.timeline: dict[str, float] = {}
        self.refs: list[ReferenceRunner] = []
        self.lane_seconds: dict[int, dict[str, float]] = {}
        self.spare_log: list[dict] = []
        self._t0 = time.monotonic() - (process_age_s() or 0.0)

    def _mark(self, event: str) -> None:
        """Seconds since the process started, for run.json's timeline: where a batch's wall time goes."""
        self.timeline[event] = round(time.monotonic() - self._t0, 2)

    # -- set-up --------------------------------------------------------------------------------
    def _scratch(self) -> Path:
        """Private scratch space for output files: memory-backed when /dev/shm has room for large outputs."""
        base = None
        if os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= SHM_MIN_FREE:
            base = "/dev/shm"
        return Path(tempfile.mkdtemp(prefix="kbh-", dir=base))

    def _cores(self) -> tuple[list[list[int] | None], list[int] | None]:
        cores = sorted(os.sched_getaffinity(0))
        n = len(self.plan.lanes)
        if self.plan.device != "cuda" or len(cores) < 4 + n:
            return [None] * n, None
        return [[cores[-(i + 1)]] for i in range(n)], cores[:-n]

    def _problem_src(self) -> dict:
        p = self.plan.problem
        return {"name": p.name, "path": p.path, "text": p.text}

    def _spawn(self, lane: int, env: dict, log: Path, trusted: bool) -> WorkerHandle:
        ident = isolation.new_identity() if self.plan.isolate and not trusted else None
        return WorkerHandle(repo_root=self.repo_root, env=env, log_path=log, cwd=self.scratch, trusted=trusted,
                            identity=ident)

    # -- tamper guard --------------------------------------------------------------------------
    def _guard_check(self) -> None:
        """Restore any change to the protected files and pin it on the candidate that made it.

        With builds running beside an evaluation, the writer is not known: every evaluation is held between
        commands, and each candidate that was building is imported again alone, the other builds stopped;
        one that writes again is the culprit, else the candidate under evaluation is.
        """
        with self.lock:
            changed = self.guard.check()
            if not changed:
                return
            with self.gate.exclusive():
                evaluating, builders = sorted(self.evaluating), sorted(self.building)
                guilty = self._attribute(builders) if builders else []
            if not guilty:
                guilty = evaluating or builders or ["(unknown)"]
            for name in guilty:
                self.tamper.setdefault(name, []).extend(changed)
            self.errors.append(f"{', '.join(guilty)} changed {', '.join(changed)} (restored)")

    def _attribute(self, builders: list[str]) -> list[str]:
        guilty = []
        for name in builders:
            cand, kwargs = self.build_args[name]
            with builds_frozen(except_name=name):
                self.guard.check()
                run_build(cand, **kwargs)
                if self.guard.check():
                    guilty.append(name)
        return guilty

    def _tampered_by(self, name: str):
        def check() -> list[str]:
            self._guard_check()
            return list(dict.fromkeys(self.tamper.get(name, [])))
        return check

    # -- run -------------------------------------------------------------------------------------
    def run(self) -> list[Record]:
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.scratch = self._scratch()
        try:
            return self._run()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _run(self) -> list[Record]:
        plan = self.plan
        self._mark("plan_made")
        existing = read_records(self.out / "results.jsonl")
        done = {(r.solution, r.shape) for r in existing}
        self.writer = RecordWriter(self.out / "results.jsonl", existing)
        src_dir = self.scratch / "src"
        cands = [snapshot_candidate(path, name, src_dir) for name, path in plan.solutions]
        if plan.isolate:
            isolation.open_to_workers(self.scratch, [c.copy_path for c in cands])
        self.guard = TreeGuard(self.repo_root, self.out, self.writer, extra_roots=(src_dir,))
        for c in cands:
            self.guard.allow_log(f"{safe_name(c.name)}.log")
            self.guard.allow_log(f"{safe_name(c.name)}.build.log")
        for i in range(len(plan.lanes)):
            self.guard.allow_log(f"reference.lane{i}.log")
            self.guard.allow_log(f"spare.lane{i}.log")
        todo = {c.name: [s for s in plan.shapes if (c.name, s.name) not in done] for c in cands}
        cands = [c for c in cands if todo[c.name]]
        lane_cores, build_cores = self._cores()
        self._mark("guard_ready")
        toolchain = toolchain_id(plan.device)
        starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbh-refs")
        ref_start = starter.submit(self._start_references, lane_cores, toolchain)
        starter.shutdown(wait=False)
        try:
            findings = {}
            for c in cands:
                found = [] if plan.static_policy == "off" else static_checks.analyze(
                    c.source, plan.device, c.path.parent, {plan.problem.name})
                findings[c.name] = found
            self._mark("static_checks_done")
            self.host = host_info(self.repo_root)
            arch_hint = gpu_arch_hint() if plan.device == "cuda" else None
            self._mark("runner_started")
            return self._pipeline(cands, todo, findings, lane_cores, build_cores, toolchain, ref_start, arch_hint)
        finally:
            with contextlib.suppress(Exception):  # a failed start has killed its workers already
                for r in ref_start.result():
                    r.worker.close()

    def _pipeline(self, cands, todo, findings, lane_cores, build_cores, toolchain, ref_start,
                  arch_hint) -> list[Record]:
        """Builds start at once where the GPU architecture is known without a CUDA context (nvidia-smi) or not
        needed (CPU), else once the references have started; lanes start once the references have."""
        plan = self.plan
        n_records = sum(len(v) for v in todo.values())
        progress = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=self.console, transient=False)
        with progress:
            t_ref = progress.add_task("reference", total=len(plan.shapes) * len(plan.lanes))
            t_build = progress.add_task("build", total=len(cands))
            t_eval = progress.add_task("evaluate", total=n_records)
            work: queue.Queue = queue.Queue()
            lanes: list[threading.Thread] = []
            pool = BuildPool(plan.jobs)
            futures: dict = {}
            arch = arch_hint
            spares: list[SparePool] = []
            try:
                if arch_hint or plan.device != "cuda":
                    self._submit_builds(pool, futures, cands, todo, findings, build_cores,
                                        build_env(arch_hint, toolchain), progress, t_build, t_eval)
                    if not plan.build_only:
                        spares = self._spare_pools(lane_cores, build_cores, toolchain, arch_hint, len(cands))
                refs: list[ReferenceRunner] = ref_start.result()
                self.refs = refs
                self._mark("references_started")
                if plan.device == "cuda":
                    arch = self.lane_info[0].get("capability")
                    if arch_hint and arch != arch_hint:
                        raise RuntimeError(f"nvidia-smi reports compute capability {arch_hint} for every GPU, but "
                                           f"torch reports {arch} on lane 0: the builds target the wrong GPU")
                    if not arch_hint:
                        self._submit_builds(pool, futures, cands, todo, findings, build_cores,
                                            build_env(arch, toolchain), progress, t_build, t_eval)
                self._write_run_json(arch, toolchain)
                if not plan.build_only:
                    spares = spares or self._spare_pools(lane_cores, build_cores, toolchain, arch, len(cands))
                    lanes = [threading.Thread(target=self._lane, name=f"kbh-lane{i}",
                                              args=(i, refs[i], lane_cores[i], spares[i], work, todo,
                                                    findings, progress, t_ref, t_eval), daemon=True)
                             for i in range(len(plan.lanes))]
                for t in lanes:
                    t.start()
                for fut in as_completed(futures):
                    c = futures[fut]
                    result = fut.result()
                    self.builds[c.name] = result
                    if self.pch is not None and self.pch.status == "not started" and not result.cached:
                        self.pch.start()  # a compile ran: make the header for the builds that start later
                    self._guard_check()
                    with self.lock:
                        self.building.discard(c.name)
                    progress.advance(t_build)
                    if plan.build_only:
                        progress.advance(t_eval, len(todo[c.name]))
                        self.console.print(f"{c.name}: {result.status} in {result.seconds:.0f} s"
                                           f"{' (cached)' if result.cached else ''} {result.message}")
                    elif result.status in ("compile_error", "timeout"):
                        self._write_all(static_only_records(plan, c, todo[c.name],
                                                            self._static_kwargs(findings[c.name]), result,
                                                            self._device_name()))
                        progress.advance(t_eval, len(todo[c.name]))
                    else:
                        work.put((c, result))
            finally:
                for _ in lanes:
                    work.put(None)
                self._mark("builds_done")
                for t in lanes:
                    t.join()
                for sp in spares:  # the lanes close theirs; these are a failed start's
                    sp.close()
                self._mark("evaluations_done")
                pool.shutdown()
                if self.pch is not None:
                    self.pch.stop()
        self._write_run_json(arch, toolchain, final=True)
        records = self.writer.records
        note = report.caption(plan.device, self._device_name(), plan.config.timing.speedup_metric,
                              plan.config.timing.speedup_quantile)
        report.write_files(records, self.out, note)
        report.print_table(records, self.console, f"{plan.problem.name}: {len(records)} records", note)
        for e in self.errors:
            self.console.print(f"[yellow]warning:[/] {e}")
        return records

    def _submit_builds(self, pool: BuildPool, futures: dict, cands, todo, findings, build_cores, benv: dict,
                       progress, t_build, t_eval) -> None:
        plan = self.plan
        self._mark("builds_started")
        wants_pch = plan.config.build.pch and not plan.isolate  # isolated builds compile in folders of their own
        if wants_pch and any(c.native_kind in ("cpp", "cuda") for c in cands) and self.pch is None:
            self.pch = HeaderBuild(plan.cache_dir, benv.get("KBH_TOOLCHAIN", ""), self.repo_root, benv,
                                   self.logs / "pch.log", plan.config.build.timeout_s, build_cores)
            self.guard.allow_log("pch.log")
            if plan.device == "cpu":
                self.pch.start()
                self.pch.wait()
            benv = dict(benv, KBH_PCH="1")
        for c in cands:
            errors = [f for f in findings[c.name] if f.severity == "error"]
            if errors and plan.static_policy == "strict":
                self._write_all(static_only_records(plan, c, todo[c.name], self._static_kwargs(findings[c.name]),
                                                    None, self._device_name()))
                progress.advance(t_build)
                progress.advance(t_eval, len(todo[c.name]))
                continue
            kwargs = dict(repo_root=self.repo_root, cache_dir=plan.cache_dir, env=benv,
                          timeout_s=plan.config.build.timeout_s,
                          log_path=self.logs / f"{safe_name(c.name)}.build.log", scratch=self.scratch,
                          cores=build_cores, nice=build_nice(len(futures)), isolate=plan.isolate)
            with self.lock:
                self.building.add(c.name)
                self.build_args[c.name] = (c, kwargs)
            futures[pool.submit(run_build, c, **kwargs)] = c

    def _static_kwargs(self, found) -> dict:
        return {"static_errors": [f"{f.rule} (line {f.line})" for f in found if f.severity == "error"],
                "static_warnings": [f"{f.rule} (line {f.line})" for f in found if f.severity == "warning"]}

    def _device_name(self) -> str:
        info = self.lane_info.get(0, {})
        return info.get("gpu") or f"CPU ({self.host.get('cpu_cores', '?')} cores)"

    def _write_all(self, records: list[Record]) -> None:
        for r in records:
            self.writer.write(r)

    # -- references -----------------------------------------------------------------------------
    def _start_references(self, lane_cores, toolchain: str) -> list[ReferenceRunner]:
        plan = self.plan
        refs: list[ReferenceRunner] = []
        envs: list[dict] = []
        for i, dev in enumerate(plan.lanes):
            turn = self._turn(i, lane_cores)
            env = {"KBH_TOOLCHAIN": toolchain, "TORCHINDUCTOR_CACHE_DIR": str(plan.cache_dir / "inductor"),
                   "TRITON_CACHE_DIR": str(plan.cache_dir / "triton")}
            if plan.device == "cuda":
                env["CUDA_VISIBLE_DEVICES"] = dev
            envs.append(env)
            log = self.logs / f"reference.lane{i}.log"
            w = take_early() if i == 0 else None
            if w is not None:
                try:
                    w.move_log(log, INIT_TIMEOUT_S)
                except WorkerGone:
                    w = None
            if w is None:
                w = self._spawn(i, env, log, trusted=True)
            refs.append(ReferenceRunner(w, plan, loop_settings(plan), plan.config.timeouts.shape_s, turn=turn))
        errors = []

        def init(i: int) -> None:
            try:
                self.lane_info[i] = refs[i].init(self._problem_src(), plan.device, str(plan.cache_dir), lane_cores[i],
                                                 envs[i])
            except (RuntimeError, WorkerGone) as e:
                errors.append(f"reference worker on lane {i} failed to start: {e}")

        threads = [threading.Thread(target=init, args=(i,)) for i in range(len(refs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            for r in refs:
                r.worker.kill()
            raise RuntimeError(errors[0] + f" (log: {self.logs})")
        return refs

    def _write_run_json(self, arch: str | None, toolchain: str, final: bool = False) -> None:
        plan = self.plan
        data = {
            "run_id": plan.run_id, "problem": plan.problem.path, "device": plan.device, "lanes": list(plan.lanes),
            "config": plan.config.to_json(), "seeds": plan.seeds_json(), "static_checks": plan.static_policy,
            "host": self.host, "devices": self.lane_info, "cuda_arch": arch, "toolchain": toolchain,
            "timing": loop_settings(plan) | {"speedup_metric": plan.config.timing.speedup_metric,
                                             "compile_reference": plan.config.timing.compile_reference},
            "build_jobs": plan.jobs, "cache_dir": str(plan.cache_dir), "notes": list(plan.notes),
            "complete": final,
        }
        if final:
            data["calibration"] = {str(k): vars(v) for k, v in self.calibrations.items()}
            data["reference_timings"] = {
                str(lane): {s: {k: (getattr(t, k).to_json() if getattr(t, k) else None)
                                for k in ("eager", "compiled", "graph", "floor_launch", "floor_read", "floor_copy")}
                            | {"compile_error": t.compile_error, "error": t.error, "seconds": t.seconds}
                            for s, t in timings.items()}
                for lane, timings in self.ref_timings.items()}
            data["reference_seconds"] = {str(i): dict(r.spent) for i, r in enumerate(self.refs)}
            data["builds"] = {k: vars(v) for k, v in self.builds.items()}
            data["pch"] = self.pch.info() if self.pch is not None else None
            data["warnings"] = self.errors
            self._mark("run_json")
            data["timeline_s"] = dict(self.timeline)
            data["lane_seconds"] = {str(k): {n: round(v, 3) for n, v in d.items()} for k, d in self.lane_seconds.items()}
            data["spares"] = list(self.spare_log)
            server = forkserver.current()
            data["fork_server"] = server.summary() if server is not None else None
        tmp = self.out / "run.json.tmp"
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(self.out / "run.json")

    # -- lanes ------------------------------------------------------------------------------------
    def _turn(self, i: int, lane_cores) -> DeviceTurn:
        return self.turns.setdefault(self.plan.lanes[i], DeviceTurn(pause_builds=lane_cores[i] is None))

    def _spare_pools(self, lane_cores, spare_cores, toolchain: str, arch: str | None, needed: int) -> list[SparePool]:
        """Each lane's spare candidate workers, started as soon as their environment is known (the architecture:
        from nvidia-smi before any CUDA context, else from the reference's): their start and device step then
        overlap the reference's start instead of its timed work. Lane 0's take the workers started with the judge
        (workers.spawn_early). None is started beyond the `needed` candidates."""
        plan = self.plan
        env = {"KBH_TOOLCHAIN": toolchain} | ({"TORCH_CUDA_ARCH_LIST": arch} if arch else {})
        pools = []
        for i in range(len(plan.lanes)):
            lane_env = dict(env) | ({"CUDA_VISIBLE_DEVICES": plan.lanes[i]} if plan.device == "cuda" else {})
            size = 1 if lane_cores[i] is None else SPARE_WORKERS
            pool = SparePool(self._spare_maker(i, lane_env, spare_cores, self._turn(i, lane_cores), size), size=size,
                             needed=needed)
            if lane_cores[i] is not None:
                pool.prime(EARLY_SPARES)  # spares import torch on the build cores while the reference works on the lane's
            pools.append(pool)
        return pools

    def _spare_maker(self, i: int, lane_env: dict, spare_cores, turn: DeviceTurn, pool_size: int):
        plan = self.plan
        init_args = {"role": "candidate", "device": plan.device, "problem_src": self._problem_src(),
                     "fp_seed": plan.fp_seed, "cache_dir": str(plan.cache_dir), "cores": spare_cores,
                     "device_now": False, "env": lane_env}
        spare_log = self.logs / f"spare.lane{i}.log"

        def make_spare(register) -> WorkerHandle | None:
            w = take_early("spare") if i == 0 else None
            times = {"lane": i, "early": w is not None}
            if w is None:
                w = self._spawn(i, lane_env, spare_log, trusted=False)
            register(w)
            times["spawned_s"] = round(w.spawned_at - self._t0, 2)
            try:
                if times["early"]:
                    w.move_log(spare_log, INIT_TIMEOUT_S)
                reply = w.request("init", INIT_TIMEOUT_S, cwd=str(w.own_folder(self.scratch)), **init_args)
                times["init_s"] = round(time.monotonic() - w.spawned_at, 3)
                if reply.get("ok") and plan.device == "cuda":
                    t1 = time.monotonic()
                    with turn.for_spare():
                        t2 = time.monotonic()
                        reply = w.request("device", INIT_TIMEOUT_S, poison_bytes=POISON_BYTES, holders=pool_size,
                                          warm_params=dict(plan.shapes[0].params) if plan.shapes else None)
                    times.update(turn_wait_s=round(t2 - t1, 3), device_s=round(time.monotonic() - t2, 3))
                if not reply.get("ok"):
                    w.kill()
                    return None
            except WorkerGone:
                return None
            finally:
                times["ready_s"] = round(time.monotonic() - self._t0, 2)
                self.spare_log.append(times)
            return w

        return make_spare

    def _lane(self, i: int, ref: ReferenceRunner, cores, spares: SparePool, work: queue.Queue, todo, findings,
              progress, t_ref, t_eval) -> None:
        plan = self.plan
        info = self.lane_info[i]
        try:
            ref.turn.open_to_spares(False)  # spares start their device in the reference's untimed stretches only
            calibration = ref.calibrate(info.get("l2_bytes") or info.get("cpu_cache_bytes") or 0)
            self.calibrations[i] = calibration
            timings: dict[str, RefTiming] = {}
            self.ref_timings[i] = timings
            for shape in plan.shapes:
                if i == 0:
                    self.store.put(ref.outputs(shape))
                ref_shape = self.store.get(shape.name)
                if ref_shape.error is None:
                    timings[shape.name] = ref.timings(shape, plan.device, ref_shape.min_bytes)
                progress.advance(t_ref)
            spares.prime()
            ref.turn.open_to_spares(True)
            self._mark(f"lane{i}_reference_done")
            ctx = LaneContext(index=i, plan=plan, store=self.store, ref=ref, timings=timings,
                              calibration=calibration, scratch=self.scratch, log_dir=self.logs,
                              device_name=info.get("gpu") or self._device_name(), cores=cores, gate=self.gate,
                              turn=ref.turn, keep=self.guard.keep,
                              poison_bytes=POISON_BYTES if plan.device == "cuda" else 0)
            spent = self.lane_seconds.setdefault(i, dict.fromkeys(LANE_STEPS, 0.0))
            loop_start = time.monotonic()
            while True:
                with seconds_into(spent, "waiting for a build"):
                    item = work.get()
                if item is None:
                    break
                cand, build = item
                if f"lane{i}_first_candidate" not in self.timeline:
                    self._mark(f"lane{i}_first_candidate")
                found = findings[cand.name]
                kw = self._static_kwargs(found)
                with self.lock:
                    self.evaluating.add(cand.name)
                ev = CandidateEvaluation(ctx, cand, build, spares, kw["static_errors"], kw["static_warnings"],
                                         self._tampered_by(cand.name))
                try:
                    for shape in todo[cand.name]:
                        with seconds_into(spent, "records"):
                            record = ev.evaluate_shape(shape)
                        with seconds_into(spent, "writing records"):
                            self.writer.write(record)
                        with seconds_into(spent, "progress display"):
                            progress.advance(t_eval)
                finally:
                    with seconds_into(spent, "closing workers"):
                        ev.close()
                    with self.lock:
                        self.evaluating.discard(cand.name)
            spent["other"] = time.monotonic() - loop_start - sum(spent.values())
        finally:
            ref.turn.open_to_spares(True)  # no spare is left waiting for a window while it is closed
            with seconds_into(self.lane_seconds.setdefault(i, {}), "closing spare workers"):
                spares.close()


LANE_STEPS = ("records", "writing records", "progress display", "closing workers", "waiting for a build")


class Gate:
    """Lanes pass it shared around each worker command; tamper attribution takes it alone."""

    def __init__(self):
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self):
        with self._cond:
            while self._writer:
                self._cond.wait()
            self._writer = True
            while self._readers:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()

"""The run pipeline: plan -> static checks -> builds (pool) -> references -> evaluation lanes -> records -> report.
Builds run in a process pool while lanes evaluate what is already built; each lane owns one device (a GPU, or the
CPU) with its reference and candidate workers. Records are written as they are decided. The judge's own threads
run no candidate code."""

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..cachekeys import toolchain_id
from ..stats import Measurement
from . import baseline, forkserver, isolation, lanes, static_checks, stopping
from .builds import (
    BuildPool,
    BuildResult,
    HeaderBuild,
    build_env,
    build_nice,
    candidate_env,
    lock_env,
    memo_hit,
    run_build,
    snapshot_candidate,
)
from .envinfo import gpu_arch_hint, host_info
from .figures import unrun_records
from .guard import reference_cache
from .plan import Plan
from .processes import WorkerGone, WorkerHandle
from .profile import Profile
from .records import STOPPING, Record, safe_name
from .reference import ReferenceRunner, ReferenceStore
from .turns import DeviceTurn
from .workspace import RunFolder, Workspace


class Runner:
    """feed: candidates that arrive while the run goes on, as (name, path, shape names), until None; a cluster
    lane (harness.judge.cluster) keeps one run open this way, its references and workers warm between them.
    on_record: called with each record as it is written."""

    def __init__(self, plan: Plan, console: Console, repo_root: Path, feed: queue.Queue | None = None,
                 on_record: Callable[[Record], None] | None = None):
        self.plan = plan
        self.feed = feed
        self.on_record = on_record
        self.console = console
        self.repo_root = repo_root
        self.out = plan.out_dir
        self.logs = self.out / "logs"
        self.profile = Profile()
        self.builds: dict[str, BuildResult] = {}
        self.pch: HeaderBuild | None = None
        self.contexts: list[lanes.LaneContext] = []
        self.lane_info: dict[int, dict] = {}
        self.toolchain = toolchain_id(plan.device)
        n = len(plan.lanes)
        cores = sorted(os.sched_getaffinity(0))
        # on a GPU host with cores to spare, each lane's timing gets a core of its own; builds and spares the rest
        own = plan.device == "cuda" and len(cores) >= 4 + n
        self.lane_cores = [[cores[-(i + 1)]] if own else None for i in range(n)]
        self.build_cores = cores[:-n] if own else None
        self.problem_src = {"name": plan.problem.name, "path": plan.problem.path, "text": plan.problem.text}

    def run(self) -> list[Record]:
        plan = self.plan
        self.folder = RunFolder(plan, self.on_record)
        self.writer = self.folder.writer
        self.ws = Workspace(plan, self.repo_root, self.folder)
        ref_start = None
        try:
            cands = [self.ws.guard.protect(self._snapshot(name, Path(path))) for name, path in plan.solutions]
            if plan.isolate:
                isolation.open_to_workers(self.ws.scratch, [c.copy_path for c in cands])
            logs = ["pch.log"] + [self._lane_log(kind, i).name for kind in ("reference", "spare")
                                  for i in range(len(plan.lanes))]
            logs += [f"{safe_name(c.name)}{ext}" for c in cands for ext in (".log", ".build.log")]  # resumed too
            for name in logs:
                self.ws.guard.allow_log(name)
            self.todo = {c.name: self.folder.todo(c.name) for c in cands}
            self.cands = [c for c in cands if self.todo[c.name]]
            starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbh-refs")
            ref_start = starter.submit(self._start_references)
            starter.shutdown(wait=False)
            self.static = {}
            for c in self.cands:
                self._admit(c)
            self.host = host_info(self.repo_root)
            self.profile.mark("runner_started")
            return self._pipeline(ref_start)
        finally:
            if ref_start is not None:
                with contextlib.suppress(Exception):  # a failed start has killed its workers already
                    for r in ref_start.result():
                        r.worker.close()
            self.ws.close()
            if STOPPING.is_set():
                stopping.kill_all()
            self.folder.reveal_seeds()

    def _admit(self, c) -> None:
        """A candidate's logs allowed in the run's folder, and its static findings (errors, warnings)."""
        for ext in (".log", ".build.log"):
            self.ws.guard.allow_log(f"{safe_name(c.name)}{ext}")
        found = [] if self.plan.static_policy == "off" else static_checks.analyze(
            c.source, self.plan.device, c.path.parent, {self.plan.problem.name})
        self.static[c.name] = tuple([f"{f.rule} (line {f.line})" for f in found if f.severity == sev]
                                    for sev in ("error", "warning"))

    def _snapshot(self, name: str, path: Path):
        def write():
            c = snapshot_candidate(path, name, self.ws.src)
            return c, c.copy_path

        return write

    def _builds_done(self, pool: BuildPool, futures: dict):
        """Builds as they finish; with a feed, candidates fed meanwhile join (their builds submitted at once)
        until it yields None."""
        pending, feeding = set(futures), self.feed is not None
        while pending or feeding:
            if pending:
                done, pending = wait(pending, timeout=0.05 if feeding else None, return_when=FIRST_COMPLETED)
                yield from done
            while feeding and (not pending or not self.feed.empty()):
                item = self.feed.get()
                if item is None:
                    feeding = False
                    break
                name, path, shapes = item
                c = self.ws.guard.protect(self._snapshot(name, Path(path)))
                self.todo[c.name] = [s for s in self.plan.shapes if s.name in shapes]
                self.cands.append(c)
                self._admit(c)
                pending |= self._submit_builds(pool, futures, self._benv, [c])

    def _pipeline(self, ref_start) -> list[Record]:
        """Builds start at once where the GPU architecture is known without a CUDA context (nvidia-smi) or not
        needed (CPU), else once the references have started; lanes start once the references have."""
        plan = self.plan
        progress = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=self.console, transient=False)
        with progress:
            tasks = {"reference": progress.add_task("reference", total=len(plan.shapes) * len(plan.lanes)),
                     "build": progress.add_task("build", total=len(self.cands)),
                     "evaluate": progress.add_task("evaluate", total=sum(len(v) for v in self.todo.values()))}
            self.advance = lambda what, n: progress.advance(tasks[what], n)
            work: queue.Queue = queue.Queue()
            threads: list[threading.Thread] = []
            pool = BuildPool(plan.jobs)
            futures: dict = {}
            arch = gpu_arch_hint() if plan.device == "cuda" else None
            try:
                if arch or plan.device != "cuda":
                    self._submit_builds(pool, futures, build_env(arch, self.toolchain, self.ws.scratch, self.ws.jit_home))
                refs: list[ReferenceRunner] = ref_start.result()
                self.profile.mark("references_started")
                if plan.device == "cuda":
                    hint, arch = arch, self.lane_info[0].get("capability")
                    if hint and arch != hint:
                        raise RuntimeError(f"nvidia-smi reports compute capability {hint} for every GPU, but torch "
                                           f"reports {arch} on lane 0: the builds target the wrong GPU")
                    if not hint:
                        self._submit_builds(pool, futures, build_env(arch, self.toolchain, self.ws.scratch, self.ws.jit_home))
                self._write_run_json(arch)
                if not plan.build_only:
                    threads = self._start_lanes(refs, arch, work)
                for fut in self._builds_done(pool, futures):
                    c, result = futures[fut], fut.result()
                    self.builds[c.name] = result
                    if self.pch is not None and self.pch.status == "not started" and not result.cached:
                        self.pch.start()  # a compile ran: make the header for the builds that start later
                    self.ws.tamper.build_ended(c.name)
                    self.advance("build", 1)
                    if plan.build_only:
                        self.advance("evaluate", len(self.todo[c.name]))
                        self.console.print(f"{c.name}: {result.status} in {result.seconds:.0f} s"
                                           f"{' (cached)' if result.cached else ''} {result.message}")
                    elif result.status in ("compile_error", "timeout"):
                        self._write_unrun(c, result)
                    else:
                        work.put((c, result))
            finally:
                for _ in threads:
                    work.put(None)
                self.profile.mark("builds_done")
                for t in threads:
                    t.join()
                self.profile.mark("evaluations_done")
                pool.shutdown()
                if self.pch is not None:
                    self.pch.stop()
        if not (plan.build_only or plan.reference_only):
            self._write_missing()
        self._write_run_json(arch, final=True)
        if plan.reference_only:
            self._write_baseline()
            return []
        records = self.folder.report(self.console, self._device_name())
        for e in self.ws.tamper.warnings:
            self.console.print(f"[yellow]warning:[/] {e}")
        return records

    def baseline_entries(self) -> dict:
        """The reference timings this run made (or scaled from its baseline), as baseline entries."""
        plan = self.plan
        timings = self.contexts[0].timings if self.contexts else {}
        entries = {}
        for s in plan.shapes:
            t = timings.get(s.name)
            if t is not None and t.eager is not None:
                entries[baseline.entry_key(plan.problem.text, s.name, dict(s.params), plan.config.check.precision)] = {
                    "problem": plan.problem.name, "shape": s.name, "params": dict(s.params),
                    "precision": plan.config.check.precision,
                    **{k: m.to_json() if m else None for k, m in (("eager", t.eager), ("compiled", t.compiled),
                                                                   ("graph", t.graph))},
                    "compile_error": t.compile_error, "cover_us": t.cover_us}
        return entries

    def _write_baseline(self) -> None:
        plan = self.plan
        entries = self.baseline_entries()
        baseline.write(plan.baseline_out, plan.device, entries)
        self.console.print(f"baseline: {len(entries)} of {len(plan.shapes)} shape(s) timed, in {plan.baseline_out}")

    def _submit_builds(self, pool: BuildPool, futures: dict, benv: dict, cands: list | None = None) -> set:
        """Each candidate's build submitted (one rejected by a strict static check gets its records instead);
        returns the new futures."""
        plan = self.plan
        self.profile.mark("builds_started", once=True)
        self._benv = benv
        wants_pch = plan.config.build.pch and not plan.isolate  # isolated builds compile in folders of their own
        if wants_pch and any(c.native_kind in ("cpp", "cuda") for c in self.cands) and self.pch is None:
            self.pch = HeaderBuild(plan.cache_dir, self.toolchain, self.repo_root, benv, self.logs / "pch.log",
                                   plan.config.build.timeout_s, self.build_cores)
            benv = self._benv = dict(benv, KBH_PCH="1")
        todo = self.cands if cands is None else cands
        if plan.device == "cpu" and self.pch is not None and self.pch.status == "not started" and any(
                c.native_kind in ("cpp", "cuda") and not memo_hit(c, repo_root=self.repo_root, cache_dir=plan.cache_dir,
                                                                  env=benv, isolate=False) for c in todo):
            self.pch.start()  # main.cpp is the whole compile: a build that compiles waits for the header
            self.pch.wait()
        new = set()
        for c in todo:
            if c.error or (self.static[c.name][0] and plan.static_policy == "strict"):
                self._write_unrun(c, None)
                self.advance("build", 1)
                continue
            kwargs = dict(repo_root=self.repo_root, cache_dir=plan.cache_dir, env=benv,
                          timeout_s=plan.config.build.timeout_s, log_path=self.logs / f"{safe_name(c.name)}.build.log",
                          scratch=self.ws.scratch, cores=self.build_cores, nice=build_nice(len(futures)),
                          isolate=plan.isolate, sandbox=self.ws.sandbox, own=plan.strict_sandbox)
            self.ws.tamper.build_started(c.name, c, kwargs)
            fut = pool.submit(run_build, c, **kwargs)
            futures[fut] = c
            new.add(fut)
        return new

    def _device_name(self) -> str:
        return self.lane_info.get(0, {}).get("gpu") or f"CPU ({self.host.get('cpu_cores', '?')} cores)"

    def _write_unrun(self, c, build: BuildResult | None) -> None:
        for r in unrun_records(self.plan, c, self.todo[c.name], self.static[c.name], build, self._device_name()):
            self.writer.write(r)
        self.advance("evaluate", len(self.todo[c.name]))

    def _write_missing(self) -> None:
        """A harness_error record for every candidate and shape that has none once the lanes are done (a lane
        that died): every candidate x shape of a run gets a record."""
        have = {(r.solution, r.shape) for r in self.writer.records}
        for c in self.cands:
            shapes = [s for s in self.todo[c.name] if (c.name, s.name) not in have]
            if shapes:
                fault = "no record was written: its evaluation lane ended early (see the lane's log)"
                for r in unrun_records(self.plan, c, shapes, self.static[c.name], None, self._device_name(), fault):
                    self.writer.write(r)

    def _lane_env(self, i: int) -> dict:
        env = {"KBH_TOOLCHAIN": self.toolchain, **candidate_env(self.ws.scratch, self.ws.jit_home),
               **lock_env(self.plan.device)}
        return env | ({"CUDA_VISIBLE_DEVICES": self.plan.lanes[i]} if self.plan.device == "cuda" else {})

    def _lane_log(self, kind: str, lane: int) -> Path:
        return self.logs / f"{kind}.lane{lane}.log"

    def _start_references(self) -> list[ReferenceRunner]:
        """Each lane's reference worker, started and initialized in parallel; lanes on one device share its turn."""
        plan = self.plan
        turns = {dev: DeviceTurn(pause_builds=self.build_cores is None) for dev in set(plan.lanes)}
        caches = forkserver.jit_cache_env(reference_cache(plan.cache_dir))
        envs = [self._lane_env(i) | caches for i in range(len(plan.lanes))]
        refs = [ReferenceRunner(WorkerHandle(repo_root=self.repo_root, env=envs[i], cwd=self.ws.scratch, trusted=True,
                                             log_path=self._lane_log("reference", i)),
                                plan, plan.config.timeouts.shape_s, turn=turns[dev])
                for i, dev in enumerate(plan.lanes)]

        def init(i: int) -> str | None:
            try:
                self.lane_info[i] = refs[i].init(self.problem_src, self.lane_cores[i], envs[i])
            except (RuntimeError, WorkerGone) as e:
                return f"reference worker on lane {i} failed to start: {e}"
            return None

        with ThreadPoolExecutor(max_workers=len(refs)) as ex:
            errors = [e for e in ex.map(init, range(len(refs))) if e]
        if errors:
            for r in refs:
                r.worker.kill()
            raise RuntimeError(errors[0] + f" (log: {self.logs})")
        return refs

    def _start_lanes(self, refs, arch, work) -> list[threading.Thread]:
        plan = self.plan
        store = ReferenceStore()
        threads = []
        for i, ref in enumerate(refs):
            info = self.lane_info[i]
            size = 1 if self.lane_cores[i] is None else lanes.SPARE_WORKERS
            lane_env = self._lane_env(i) | ({"TORCH_CUDA_ARCH_LIST": arch} if arch else {})
            make = lanes.spare_maker(plan, self.repo_root, lane_env, self.ws.scratch, self._lane_log("spare", i),
                                     self.build_cores, ref.turn, size, self.problem_src, self.profile)
            ctx = lanes.LaneContext(
                index=i, plan=plan, store=store, ref=ref, scratch=self.ws.scratch, log_dir=self.logs,
                device_name=info.get("gpu") or self._device_name(), cores=self.lane_cores[i], tamper=self.ws.tamper,
                profile=self.profile, sandbox=self.ws.sandbox, cache_bytes=info.get("l2_bytes") or info.get("cpu_cache_bytes") or 0)
            self.contexts.append(ctx)
            spares = lanes.SparePool(make, size=size, needed=None if self.feed else len(self.cands))
            threads.append(threading.Thread(target=lanes.run_lane, name=f"kbh-lane{i}", daemon=True, args=(
                ctx, spares, work, self.todo, self.static, self.writer, self.advance)))
        for t in threads:
            t.start()
        return threads

    def _write_run_json(self, arch: str | None, final: bool = False) -> None:
        plan = self.plan
        data = {"lanes": list(plan.lanes), "host": self.host, "devices": self.lane_info, "cuda_arch": arch,
                "toolchain": self.toolchain, "build_jobs": plan.jobs, "write_sandbox": self.ws.sandbox_status}
        if final:
            data["reference_timings"] = {
                str(c.index): {s: {k: (v.to_json() if isinstance(v, Measurement) else v) for k, v in vars(t).items()}
                               for s, t in c.timings.items()}
                for c in self.contexts}
            data["builds"] = {k: vars(v) for k, v in self.builds.items()}
            data["pch"] = self.pch.info() if self.pch is not None else None
            data["warnings"] = self.ws.tamper.warnings
            server = forkserver.current()
            data["fork_server"] = server.summary() if server is not None else None
            if plan.profile:
                self.profile.mark("run_json")
                data["profile"] = {"timeline_s": dict(self.profile.timeline), "spares": list(self.profile.spares)}
        self.folder.write_run_json(final, **data)

"""The run pipeline: plan -> static checks -> builds (pool) -> references -> evaluation lanes -> records -> report.

Builds run in a process pool while lanes evaluate what is already built; each lane owns one device (a GPU, or
the CPU) with its reference worker and candidate workers. Records are written as they are decided. The judge's
own threads run no candidate code.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ..cachekeys import toolchain_id
from . import forkserver, isolation, report, static_checks
from .builds import BuildPool, BuildResult, HeaderBuild, build_env, build_nice, run_build, snapshot_candidate
from .envinfo import gpu_arch_hint, host_info
from .evaluate import safe_name
from .figures import unrun_records
from .guard import TamperWatch, TreeGuard
from .lanes import (
    POISON_BYTES,
    SPARE_WORKERS,
    LaneContext,
    SparePool,
    lane_log,
    run_lane,
    spare_maker,
    start_worker,
)
from .plan import Plan
from .processes import WorkerGone
from .profile import Profile
from .records import Record, RecordWriter, read_records
from .reference import ReferenceRunner, ReferenceStore
from .turns import DeviceTurn

SHM_MIN_FREE = 8 * 2**30


class Runner:
    def __init__(self, plan: Plan, console: Console, repo_root: Path):
        self.plan = plan
        self.console = console
        self.repo_root = repo_root
        self.out = plan.out_dir
        self.logs = self.out / "logs"
        self.profile = Profile(plan.profile)
        self.builds: dict[str, BuildResult] = {}
        self.pch: HeaderBuild | None = None
        self.lanes: list[LaneContext] = []
        self.lane_info: dict[int, dict] = {}

    def run(self) -> list[Record]:
        self.out.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        self.scratch = self._scratch()
        try:
            return self._run()
        finally:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _scratch(self) -> Path:
        """Private scratch space for output files: memory-backed when /dev/shm has room for large outputs."""
        shm = os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= SHM_MIN_FREE
        return Path(tempfile.mkdtemp(prefix="kbh-", dir="/dev/shm" if shm else None))

    def _cores(self) -> tuple[list[list[int] | None], list[int] | None]:
        """On a GPU host with cores to spare, each lane's timing gets a core of its own; builds and spares the rest."""
        cores = sorted(os.sched_getaffinity(0))
        n = len(self.plan.lanes)
        if self.plan.device != "cuda" or len(cores) < 4 + n:
            return [None] * n, None
        return [[cores[-(i + 1)]] for i in range(n)], cores[:-n]

    def _problem_src(self) -> dict:
        p = self.plan.problem
        return {"name": p.name, "path": p.path, "text": p.text}

    def _run(self) -> list[Record]:
        plan = self.plan
        existing = read_records(self.out / "results.jsonl")
        done = {(r.solution, r.shape) for r in existing}
        self.writer = RecordWriter(self.out / "results.jsonl", existing)
        src_dir = self.scratch / "src"
        cands = [snapshot_candidate(path, name, src_dir) for name, path in plan.solutions]
        if plan.isolate:
            isolation.open_to_workers(self.scratch, [c.copy_path for c in cands])
        guard = TreeGuard(self.repo_root, self.out, self.writer, extra_roots=(src_dir,))
        for name in [f"{safe_name(c.name)}{ext}" for c in cands for ext in (".log", ".build.log")] + ["pch.log"]:
            guard.allow_log(name)
        for i in range(len(plan.lanes)):
            guard.allow_log(lane_log(self.logs, "reference", i).name)
            guard.allow_log(lane_log(self.logs, "spare", i).name)
        self.tamper = TamperWatch(guard)
        todo = {c.name: [s for s in plan.shapes if (c.name, s.name) not in done] for c in cands}
        cands = [c for c in cands if todo[c.name]]
        lane_cores, build_cores = self._cores()
        toolchain = toolchain_id(plan.device)
        starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kbh-refs")
        ref_start = starter.submit(self._start_references, lane_cores, toolchain)
        starter.shutdown(wait=False)
        try:
            static = {}
            for c in cands:
                found = [] if plan.static_policy == "off" else static_checks.analyze(
                    c.source, plan.device, c.path.parent, {plan.problem.name})
                static[c.name] = ([f"{f.rule} (line {f.line})" for f in found if f.severity == "error"],
                                  [f"{f.rule} (line {f.line})" for f in found if f.severity == "warning"])
            self.host = host_info(self.repo_root)
            arch_hint = gpu_arch_hint() if plan.device == "cuda" else None
            self.profile.mark("runner_started")
            return self._pipeline(cands, todo, static, lane_cores, build_cores, toolchain, ref_start, arch_hint)
        finally:
            with contextlib.suppress(Exception):  # a failed start has killed its workers already
                for r in ref_start.result():
                    r.worker.close()

    def _pipeline(self, cands, todo, static, lane_cores, build_cores, toolchain, ref_start, arch_hint) -> list[Record]:
        """Builds start at once where the GPU architecture is known without a CUDA context (nvidia-smi) or not
        needed (CPU), else once the references have started; lanes start once the references have."""
        plan = self.plan
        progress = Progress(TextColumn("{task.description:<10}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), console=self.console, transient=False)
        with progress:
            tasks = {"reference": progress.add_task("reference", total=len(plan.shapes) * len(plan.lanes)),
                     "build": progress.add_task("build", total=len(cands)),
                     "evaluate": progress.add_task("evaluate", total=sum(len(v) for v in todo.values()))}

            def advance(what: str, n: int) -> None:
                progress.advance(tasks[what], n)

            work: queue.Queue = queue.Queue()
            threads: list[threading.Thread] = []
            pool = BuildPool(plan.jobs)
            futures: dict = {}
            arch = arch_hint
            try:
                if arch_hint or plan.device != "cuda":
                    self._submit_builds(pool, futures, cands, todo, static, build_cores, build_env(arch_hint, toolchain),
                                        advance)
                refs: list[ReferenceRunner] = ref_start.result()
                self.profile.mark("references_started")
                if plan.device == "cuda":
                    arch = self.lane_info[0].get("capability")
                    if arch_hint and arch != arch_hint:
                        raise RuntimeError(f"nvidia-smi reports compute capability {arch_hint} for every GPU, but torch "
                                           f"reports {arch} on lane 0: the builds target the wrong GPU")
                    if not arch_hint:
                        self._submit_builds(pool, futures, cands, todo, static, build_cores, build_env(arch, toolchain),
                                            advance)
                self._write_run_json(arch, toolchain)
                if not plan.build_only:
                    threads = self._start_lanes(refs, lane_cores, build_cores, toolchain, arch, len(cands), work, todo,
                                                static, advance)
                for fut in as_completed(futures):
                    c = futures[fut]
                    result = fut.result()
                    self.builds[c.name] = result
                    if self.pch is not None and self.pch.status == "not started" and not result.cached:
                        self.pch.start()  # a compile ran: make the header for the builds that start later
                    self.tamper.build_ended(c.name)
                    advance("build", 1)
                    if plan.build_only:
                        advance("evaluate", len(todo[c.name]))
                        self.console.print(f"{c.name}: {result.status} in {result.seconds:.0f} s"
                                           f"{' (cached)' if result.cached else ''} {result.message}")
                    elif result.status in ("compile_error", "timeout"):
                        self._write_all(unrun_records(plan, c, todo[c.name], static[c.name], result, self._device_name()))
                        advance("evaluate", len(todo[c.name]))
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
        self._write_run_json(arch, toolchain, final=True)
        records = self.writer.records
        note = report.caption(plan.device, self._device_name(), plan.config.timing.speedup_metric,
                              plan.config.timing.speedup_quantile)
        report.write_files(records, self.out, note)
        report.print_table(records, self.console, f"{plan.problem.name}: {len(records)} records", note)
        for e in self.tamper.warnings:
            self.console.print(f"[yellow]warning:[/] {e}")
        return records

    def _submit_builds(self, pool: BuildPool, futures: dict, cands, todo, static, build_cores, benv: dict,
                       advance) -> None:
        plan = self.plan
        self.profile.mark("builds_started")
        wants_pch = plan.config.build.pch and not plan.isolate  # isolated builds compile in folders of their own
        if wants_pch and any(c.native_kind in ("cpp", "cuda") for c in cands) and self.pch is None:
            self.pch = HeaderBuild(plan.cache_dir, benv.get("KBH_TOOLCHAIN", ""), self.repo_root, benv,
                                   self.logs / "pch.log", plan.config.build.timeout_s, build_cores)
            if plan.device == "cpu":
                self.pch.start()
                self.pch.wait()
            benv = dict(benv, KBH_PCH="1")
        for c in cands:
            if static[c.name][0] and plan.static_policy == "strict":
                self._write_all(unrun_records(plan, c, todo[c.name], static[c.name], None, self._device_name()))
                advance("build", 1)
                advance("evaluate", len(todo[c.name]))
                continue
            kwargs = dict(repo_root=self.repo_root, cache_dir=plan.cache_dir, env=benv,
                          timeout_s=plan.config.build.timeout_s, log_path=self.logs / f"{safe_name(c.name)}.build.log",
                          scratch=self.scratch, cores=build_cores, nice=build_nice(len(futures)), isolate=plan.isolate)
            self.tamper.build_started(c.name, c, kwargs)
            futures[pool.submit(run_build, c, **kwargs)] = c

    def _device_name(self) -> str:
        info = self.lane_info.get(0, {})
        return info.get("gpu") or f"CPU ({self.host.get('cpu_cores', '?')} cores)"

    def _write_all(self, records: list[Record]) -> None:
        for r in records:
            self.writer.write(r)

    def _lane_env(self, i: int, toolchain: str) -> dict:
        env = {"KBH_TOOLCHAIN": toolchain}
        return env | ({"CUDA_VISIBLE_DEVICES": self.plan.lanes[i]} if self.plan.device == "cuda" else {})

    def _start_references(self, lane_cores, toolchain: str) -> list[ReferenceRunner]:
        plan = self.plan
        turns: dict[str, DeviceTurn] = {}
        refs, envs = [], []
        for i, dev in enumerate(plan.lanes):
            turn = turns.setdefault(dev, DeviceTurn(pause_builds=lane_cores[i] is None))
            env = self._lane_env(i, toolchain) | {"TORCHINDUCTOR_CACHE_DIR": str(plan.cache_dir / "inductor"),
                                                  "TRITON_CACHE_DIR": str(plan.cache_dir / "triton")}
            envs.append(env)
            w = start_worker(plan, self.repo_root, env, lane_log(self.logs, "reference", i), self.scratch, trusted=True)
            refs.append(ReferenceRunner(w, plan, plan.config.timeouts.shape_s, turn=turn))
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

    def _start_lanes(self, refs, lane_cores, spare_cores, toolchain, arch, needed, work, todo, static,
                     advance) -> list[threading.Thread]:
        plan = self.plan
        store = ReferenceStore()
        threads = []
        for i, ref in enumerate(refs):
            info = self.lane_info[i]
            size = 1 if lane_cores[i] is None else SPARE_WORKERS
            lane_env = self._lane_env(i, toolchain) | ({"TORCH_CUDA_ARCH_LIST": arch} if arch else {})
            make = spare_maker(plan, self.repo_root, lane_env, self.scratch, lane_log(self.logs, "spare", i),
                               spare_cores, ref.turn, size, self._problem_src(), self.profile)
            ctx = LaneContext(index=i, plan=plan, store=store, ref=ref, scratch=self.scratch, log_dir=self.logs,
                              device_name=info.get("gpu") or self._device_name(), cores=lane_cores[i],
                              poison_bytes=POISON_BYTES if plan.device == "cuda" else 0, gate=self.tamper.gate,
                              turn=ref.turn, keep=self.tamper.guard.keep, profile=self.profile,
                              cache_bytes=info.get("l2_bytes") or info.get("cpu_cache_bytes") or 0)
            self.lanes.append(ctx)
            spares = SparePool(make, size=size, needed=needed)
            threads.append(threading.Thread(target=run_lane, name=f"kbh-lane{i}", daemon=True,
                                            args=(ctx, spares, work, todo, static, self.tamper, self.writer, advance)))
        for t in threads:
            t.start()
        return threads

    def _write_run_json(self, arch: str | None, toolchain: str, final: bool = False) -> None:
        plan = self.plan
        data = {
            "run_id": plan.run_id, "problem": plan.problem.path, "device": plan.device, "lanes": list(plan.lanes),
            "config": plan.config.to_json(), "seeds": plan.seeds_json(), "static_checks": plan.static_policy,
            "host": self.host, "devices": self.lane_info, "cuda_arch": arch, "toolchain": toolchain,
            "build_jobs": plan.jobs, "cache_dir": str(plan.cache_dir), "notes": list(plan.notes), "complete": final,
        }
        if final:
            data["reference_timings"] = {
                str(c.index): {s: {k: (getattr(t, k).to_json() if getattr(t, k) else None)
                                   for k in ("eager", "compiled", "graph", "floor_launch", "floor_read", "floor_copy")}
                               | {"empty_gap_us": t.empty_gap_us, "compile_error": t.compile_error, "error": t.error,
                                  "seconds": t.seconds}
                               for s, t in c.timings.items()}
                for c in self.lanes}
            data["builds"] = {k: vars(v) for k, v in self.builds.items()}
            data["pch"] = self.pch.info() if self.pch is not None else None
            data["warnings"] = self.tamper.warnings
            server = forkserver.current()
            data["fork_server"] = server.summary() if server is not None else None
            if plan.profile:
                self.profile.mark("run_json")
                data["profile"] = {"timeline_s": dict(self.profile.timeline), "spares": list(self.profile.spares)}
        tmp = self.out / "run.json.tmp"
        tmp.write_text(json.dumps(data, indent=2, default=str))
        tmp.replace(self.out / "run.json")


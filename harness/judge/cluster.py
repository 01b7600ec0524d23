"""A run across a Ray cluster (`--cluster ray[:ADDRESS]`, the optional extra `.[ray]`).

Each GPU of the cluster hosts one lane actor (`num_gpus=1`): a judge process of its own that runs the local
pipeline (`Runner` with a feed), so its reference, its workers and its fork server stay warm between candidates,
and every verdict is decided there by the same code as a local run's, the candidate's code running only in the
worker processes that actor starts. Reference and candidate are timed on that actor's GPU, so no speedup compares
times across GPU models. Builds are Ray tasks on CPUs, keyed by content (the build cache's own keys cover source,
GPU architecture, compilers, torch and Python); the extensions a build made travel through the object store to
any lane whose environment has the same key. The driver (schedule.dispatch, over `RayLanes`) hands each lane up
to DEPTH candidates, re-queues the candidates a lost lane held, and writes every record once, with the node and
GPU it ran on.
"""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from rich.console import Console

from ..errors import UsageError
from .buildcache import memo_lookup
from .builds import build_env, read_candidate
from .cluster_builds import REPO, build_task, node_cache, source_memo_key, unpack_build
from .plan import Plan
from .records import Record
from .schedule import DEPTH, Candidate, Evaluated, LaneStartError, dispatch, failed_records
from .workspace import RunFolder

LOG_BYTES = 1 << 20  # the end of a candidate's log that comes back from its lane
_CONNECTED: dict[str, str] = {}


def _ray():
    try:
        import ray
    except ImportError:
        raise UsageError("--cluster ray: Ray is not installed (pip install '.[ray]')") from None
    return ray


def connect(spec: str, repo_root: Path, logical_gpus: int = 0) -> str:
    """`ray`: the cluster at RAY_ADDRESS, else a running local one, else a new local instance (declaring
    `logical_gpus` GPUs for a CPU run); `ray:ADDRESS` names one. A connection this process holds is reused
    where it leads there (the caller's own too: its nodes must then import the harness); one of ours that
    leads elsewhere is closed first. Returns the address used."""
    kind, _, address = spec.partition(":")
    if kind != "ray":
        raise UsageError(f"--cluster {spec}: expected ray or ray:ADDRESS")
    ray = _ray()
    address = address or os.environ.get("RAY_ADDRESS", "")
    if ray.is_initialized():
        current = ray.get_runtime_context().gcs_address
        ours = _CONNECTED.get("gcs") == current
        if not address or address in (current, _CONNECTED.get("address") if ours else None):
            return _CONNECTED["used"] if ours else current
        if not ours:  # the caller's own connection: not the harness's to close
            raise UsageError(f"--cluster {spec}: this process is connected to the Ray cluster at {current}")
        ray.shutdown()
    env = {"excludes": [".git", ".cache", "results", ".ab", "*.so"], "working_dir": str(repo_root)}
    opts = dict(log_to_driver=False, include_dashboard=False, runtime_env=env)
    try:
        ray.init(address=address or "auto", **opts)
        used = address or "auto"
    except ConnectionError:
        if address:
            raise UsageError(f"--cluster {spec}: no Ray cluster answers at {address}") from None
        ray.init(num_gpus=logical_gpus or None, object_store_memory=200 * 2**20, **opts)
        used = "local"
    _CONNECTED.update(address=address, used=used, gcs=ray.get_runtime_context().gcs_address)
    return used


class Lane:
    """A Ray actor: one GPU (or, on a CPU run, one logical GPU) and its fork server for its whole life, and one
    open local run at a time (begin ... end), whose reference and workers stay warm between its candidates."""

    def __init__(self, plan: Plan):
        from . import forkserver

        forkserver.start(REPO)  # before this process imports torch: the server's own import overlaps it
        self.tmp = Path(tempfile.mkdtemp(prefix="kbh-lane-"))
        self.gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]  # Ray's choice, for the workers too
        self.runs = 0
        self.thread: threading.Thread | None = None
        self.begin(plan)

    def begin(self, plan: Plan) -> None:
        """A run of its own for `plan` (its seeds, its reference), the previous run ended first."""
        from .runner import Runner

        self.end()
        self.runs += 1
        self.ended = False
        self.plan = replace(plan, solutions=(), out_dir=self.tmp / f"run{self.runs}",
                            cache_dir=node_cache(plan.cache_dir),
                            lanes=(self.gpu,) if plan.device == "cuda" else ("cpu",), notes=(), profile=False)
        self.plan.out_dir.mkdir(parents=True)
        self.feed: queue.Queue = queue.Queue()
        self.boxes: dict[str, queue.Queue] = {}
        self.lock = threading.Lock()
        self.runner = Runner(self.plan, Console(quiet=True), REPO, feed=self.feed, on_record=self._record)
        self.error: list[str] = []
        self.fed = 0
        self.arch: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _box(self, name: str) -> queue.Queue:
        with self.lock:
            return self.boxes.setdefault(name, queue.Queue())

    def _record(self, rec: Record) -> None:
        self._box(rec.solution).put(rec)

    def _run(self) -> None:
        """The lane's run; once it ends, every candidate still waiting is told (None in its box)."""
        try:
            self.runner.run()
        except BaseException as e:  # noqa: BLE001  (reported to the driver by evaluate)
            self.error.append(f"{type(e).__name__}: {e}")
        finally:
            with self.lock:
                self.ended = True
                for box in self.boxes.values():
                    box.put(None)

    def _raise_ended(self) -> None:
        why = "; ".join(self.error) or "no error reported"
        if 0 not in self.runner.lane_info:
            raise LaneStartError(f"lane failed to start: {why}")
        raise RuntimeError(f"lane's run ended: {why}")

    def info(self, started: bool = False) -> dict:
        """Where this lane runs and what a build for it must match: at once where nvidia-smi gives the GPU
        architecture (or on a CPU run), so builds and the first candidates overlap the reference's start; with
        `started`, once the reference worker is up, with the GPU's name."""
        import ray
        import torch

        from .envinfo import gpu_arch_hint

        arch = gpu_arch_hint() if self.plan.device == "cuda" else None
        while (started or (self.plan.device == "cuda" and not arch)) and 0 not in self.runner.lane_info:
            if not self.thread.is_alive():
                self._raise_ended()
            time.sleep(0.02)
        lane = self.runner.lane_info.get(0, {})
        self.arch = lane.get("capability") or arch
        return {"node": socket.gethostname(), "node_id": ray.get_runtime_context().get_node_id(),
                "gpu": lane.get("gpu"), "arch": self.arch, "toolchain": self.runner.toolchain,
                "torch": torch.__version__}

    def evaluate(self, name: str, source: str, shapes: list[str], build: list) -> Evaluated:
        """One candidate's records at `shapes`, and the end of its log (LOG_BYTES). build: [a build task's
        reference]; where that build failed or its node is gone, the lane builds the candidate itself."""
        import ray

        env = build_env(self.arch, self.runner.toolchain, self.tmp)
        if memo_lookup(self.plan.cache_dir, source_memo_key(source, env)) is None:  # else built here already
            try:
                status, blob = ray.get(build[0])
                if status == "built":
                    unpack_build(self.plan.cache_dir, blob)
            except Exception:  # noqa: BLE001, S110
                pass
        self.fed += 1
        path = self.tmp / f"candidates{self.runs}" / str(self.fed) / f"{Path(name).name}.py"
        path.parent.mkdir(parents=True)
        path.write_text(source)
        box = self._box(name)
        with self.lock:
            if self.ended:
                self._raise_ended()
        self.feed.put((name, str(path), shapes))
        mine: list[Record] = []
        while len(mine) < len(shapes):
            rec = box.get()
            if rec is None:
                self._raise_ended()
            mine.append(rec)
        log = b""
        with contextlib.suppress(OSError, TypeError):
            with open(mine[0].log, "rb") as f:
                f.seek(max(f.seek(0, os.SEEK_END) - LOG_BYTES, 0))
                log = f.read()
        return Evaluated(mine, log)

    def end(self) -> dict:
        """The open run ended: its reference and workers stopped, its folder removed; the fork server stays.
        Returns the reference timings it made, as baseline entries."""
        if self.thread is None:
            return {}
        self.feed.put(None)
        self.thread.join(timeout=60)
        entries = self.runner.baseline_entries()
        for folder in (self.plan.out_dir, self.tmp / f"candidates{self.runs}"):
            shutil.rmtree(folder, ignore_errors=True)
        self.thread = None
        return entries

    def close(self) -> None:
        from . import forkserver

        self.end()
        forkserver.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


@dataclass
class LanePool:
    """Lane actors kept between runs (an Evaluator's calls, a suite's problems), with the reference timings each
    lane's runs made, as baseline entries: a later run of the same reference on that lane skips torch.compile."""

    actors: list = field(default_factory=list)
    baseline: dict = field(default_factory=dict)  # actor -> its entries

    def release(self) -> None:
        """Every lane closed and its actor killed."""
        ray = _ray()
        for a in self.actors:
            _close(ray, a)
        self.actors.clear()
        self.baseline.clear()


def _close(ray, actor) -> None:
    """A lane closed (its run and fork server ended), then its actor killed, closed or not."""
    with contextlib.suppress(Exception):
        ray.get(actor.close.remote(), timeout=60)
    with contextlib.suppress(Exception):
        ray.kill(actor, no_restart=True)


class RayLanes:
    """schedule.Lanes over Ray: lanes are actors, evaluations ObjectRefs. Builds are Ray tasks, one per content
    and lane environment (a lane of that environment reuses it), started for every candidate at once."""

    def __init__(self, ray, plan: Plan, infos: dict):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray, self.plan, self.infos, self.affinity = ray, plan, infos, NodeAffinitySchedulingStrategy
        self.builds: dict[tuple, object] = {}
        self.build_remote = ray.remote(num_cpus=1, max_retries=2)(build_task)

    def build(self, actor, cand: Candidate):
        info = self.infos[actor]
        key = (cand.source, info["arch"], info["toolchain"], info["torch"])
        if key not in self.builds:
            self.builds[key] = self.build_remote.options(scheduling_strategy=self.affinity(info["node_id"], soft=True)
                                                         ).remote(self.plan, cand.name, cand.source, info["arch"],
                                                                  info["toolchain"])
        return self.builds[key]

    def submit(self, actor, cand: Candidate, shapes: list[str]):
        build = [self.build(actor, cand)]  # in a list: the lane waits for it, not Ray
        return actor.evaluate.remote(cand.name, cand.source, shapes, build)

    def wait(self, handles: list):
        [ref], _ = self.ray.wait(handles, num_returns=1)
        return ref

    def result(self, handle) -> Evaluated:
        return self.ray.get(handle)

    def node(self, actor) -> str:
        return self.infos[actor]["node"]

    def drop(self, actor, error: BaseException) -> str:
        self.ray.kill(actor, no_restart=True)
        exc = self.ray.exceptions
        return "lost" if isinstance(error, (exc.RayActorError, exc.ActorUnavailableError)) else "failed"


def run_cluster(plan: Plan, console: Console, repo_root: Path, spec: str,
                pool: LanePool | None = None) -> list[Record]:
    """The plan's candidates over every lane of the cluster; records and tables as a local run writes them.
    Records already in the output folder (--resume) are kept and not evaluated again. pool: lanes kept between
    runs (an Evaluator's, a suite's): its live lanes begin this run and stay up after it (LanePool.release ends
    them), and lanes started for it join it."""
    ray = _ray()
    if plan.build_only or plan.reference_only:
        raise UsageError("--cluster: --build-only and --reference-only run on one host")
    address = connect(spec, repo_root, logical_gpus=len(plan.lanes) if plan.device == "cpu" else 0)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise UsageError(f"--cluster {spec}: the Ray cluster ({address}) has no GPU; a CPU run needs logical "
                         "GPUs (ray start --num-gpus N)")
    folder = RunFolder(plan)
    out, writer = folder.out, folder.writer
    todo = {name: [s.name for s in folder.todo(name)] for name, _ in plan.solutions}
    cands = []
    for name, path in plan.solutions:
        if not todo[name]:
            continue
        text, error = read_candidate(path)
        cand = Candidate(name, Path(path), text or "")
        if error:
            for rec in failed_records(plan.problem.name, cand, todo[name], error):
                writer.write(rec)
        else:
            cands.append(cand)
    actor_cls = ray.remote(num_gpus=1, num_cpus=0, max_restarts=0, max_concurrency=DEPTH + 1)(Lane)
    actors = []
    for a in list(pool.actors if pool else []):
        try:
            known = {**pool.baseline.get(a, {}), **(plan.baseline or {})}
            ray.get(a.begin.remote(replace(plan, baseline=known or None)), timeout=600)
            actors.append(a)
        except Exception:  # noqa: BLE001  (a lane lost since the last run is replaced)
            ray.kill(a, no_restart=True)
    actors += [actor_cls.remote(plan) for _ in range(gpus - len(actors))]
    if pool is not None:
        pool.actors[:] = actors
    try:
        infos = dict(zip(actors, ray.get([a.info.remote() for a in actors])))
    except Exception as e:  # noqa: BLE001
        _kill_all(ray, actors)
        raise RuntimeError(f"a cluster lane failed to start: {type(e).__name__}: {str(e)[:500]}") from None
    _write_run_json(folder, address, infos, final=False)
    console.print(f"run {plan.run_id}: {len(cands)} solution(s) x {len(plan.shapes)} shape(s) on {len(actors)} "
                  f"lane(s) of the Ray cluster ({address}), seeds committed ({plan.seed_commitment[:12]}), "
                  f"output {out}")
    lanes = RayLanes(ray, plan, infos)
    for cand in cands:  # every build starts at once; lanes take candidates as they are built
        lanes.build(actors[0], cand)
    try:
        dispatch(lanes, actors, cands, todo, writer, out, plan.problem.name, console.print)
        for a in actors:  # with the GPU's name, now that each reference is up
            with contextlib.suppress(Exception):
                infos[a] = ray.get(a.info.remote(started=True), timeout=60)
    except RuntimeError:
        _kill_all(ray, actors)
        raise
    finally:
        for a in actors:
            if pool is None:
                _close(ray, a)
                continue
            try:
                pool.baseline.setdefault(a, {}).update(ray.get(a.end.remote(), timeout=60))
            except Exception:  # noqa: BLE001  (a lane that cannot end its run is killed)
                ray.kill(a, no_restart=True)
                pool.actors.remove(a)
    _write_run_json(folder, address, infos, final=True)
    return folder.report(console, next((i["gpu"] for i in infos.values() if i["gpu"]), None) or "CPU")


def _kill_all(ray, actors: list) -> None:
    for a in actors:
        ray.kill(a, no_restart=True)


def _write_run_json(folder: RunFolder, address: str, infos: dict, final: bool) -> None:
    folder.write_run_json(final, cluster=address,
                          lanes=[{k: v for k, v in i.items() if k != "node_id"} for i in infos.values()])

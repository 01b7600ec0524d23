"""The worker: runs the reference or one candidate on the judge's commands and sends evidence, never a verdict
(JSON, raw output frames or files; nothing from a candidate is unpickled, later patches are reported)."""

import contextlib
import functools
import importlib
import json
import os
import sys
import threading
import time
import traceback
import weakref
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from .. import problem
from .. import sandbox as write_sandbox
from . import clocks, extcache
from .build_main import import_candidate
from .feed import poison_size
from .fingerprint import Fingerprinter
from .outputs import (
    BadOutput,
    HarnessError,
    OutputSlots,
    aliases,
    as_bytes,
    plain_outputs,
    poison,
    storage_span,
    tensor_bytes,
    tensor_meta,
)
from .timed import TimedCommands
from .watch import (
    ProfileAudit,
    RuntimeWatch,
    hooks_off,
    native_threads,
    preload_compile,
    quiet_loop,
    settle_gc,
)

_perf = time.perf_counter
_set_det = torch.use_deterministic_algorithms
_det_enabled = torch.are_deterministic_algorithms_enabled
_gc_collect = __import__("gc").collect


def free_gib(device: str) -> float:
    if device == "cuda":
        return torch.cuda.mem_get_info()[0] / 2**30
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30


class Worker(TimedCommands):
    def __init__(self, conn: Connection | None):
        self.conn = conn
        self.role, self.device = "reference", "cpu"
        self.watch: RuntimeWatch | None = None
        self.poisoned = False
        self.cls = self.model = self.compiled = None
        self.params: dict = {}
        self.precision = "as_written"
        self.py_threads: set[int] = set()
        self.slots = OutputSlots()
        self.returned: list = []
        self.guard = self.quiet = contextlib.nullcontext
        self.strict = False
        self.noted: set[str] = set()

    def send(self, obj: dict) -> None:
        self.conn.send_bytes(json.dumps(obj).encode())

    def recv(self) -> dict:
        return json.loads(self.conn.recv_bytes())

    def serve(self) -> None:
        while True:
            try:
                msg = self.recv()
            except (EOFError, OSError):
                return
            cmd = msg.pop("cmd")
            if cmd == "exit":
                self.send({"ok": True})
                return
            frames: list = []
            t0 = _perf()
            try:
                reply = {"ok": True, **(getattr(self, f"cmd_{cmd}")(frames=frames, **msg) or {})}
            except BadOutput as e:
                reply = {"ok": False, "bad_output": e.kind, "message": str(e)}
            except HarnessError as e:
                reply = {"ok": False, "harness_error": True, "message": str(e)}
            except BaseException as e:
                traceback.print_exc()
                name = type(e).__name__
                text = f"{name}: {e}"
                reply = {"ok": False, "error": name, "message": text[:4000],
                         "cuda_error": "CUDA" in text or "cuda" in name.lower() or "AcceleratorError" in name}
                frames = []
            if self.watch is not None:
                reply["patched"] = self.watch.changed()
            reply["worker_s"] = round(_perf() - t0, 4)
            sys.stdout.flush()
            sys.stderr.flush()
            self.send(reply)
            for f in frames:
                self.conn.send_bytes(f)

    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _pin(self, cores: list[int] | None) -> None:
        """Unpinned CPU workers run one thread: they share the host's cores with builds and spares, and a
        call's threads waiting at a barrier for a preempted sibling measured 16 ms instead of 0.45 ms."""
        if cores:
            os.sched_setaffinity(0, cores)
            torch.set_num_threads(len(cores))
        elif self.device == "cpu":
            torch.set_num_threads(1)

    def _poison_free_memory(self, nbytes: int, holders: int = 1) -> None:
        """A 0xFF block released to the caching allocator: allocations carved from it read NaN or -1."""
        if nbytes and self.device == "cuda" and not self.poisoned:
            self.poisoned = True
            size = poison_size(torch.cuda.mem_get_info()[0], nbytes, holders)
            torch.empty(size, dtype=torch.uint8, device="cuda").fill_(255)  # freed at once, to the cache
            torch.cuda.synchronize()

    def cmd_init(self, frames, role: str, device: str, problem_src: dict, fp_seed: int, cache_dir: str,
                 cores: list[int] | None = None, device_now: bool = True, env: dict | None = None,
                 cwd: str | None = None, strict: bool = False) -> dict:
        """A spare starts its device later (`device`, in its turn): a CUDA context made while another
        candidate is timed would share its GPU. env is applied before anything reads it. strict: draws and
        output reads of timed calls run with the candidate's hooks off (watch.hooks_off), and timed commands
        with the collector off (watch.quiet_loop); compile's first-use changes come before the watch's snapshot;
        draws seed through functions bound now; checked calls run in the modes timed ones do (otherwise in
        deterministic mode, which fills new tensors with NaN but tells a check from a timed call)."""
        self.strict = strict
        if strict:  # what the hooks, the collector and the audit see goes into the watch's report
            problem.bind_seeders()
            self.guard = functools.partial(hooks_off, self.noted)
            self.quiet = functools.partial(quiet_loop, ProfileAudit(self.noted))
        if env:
            if torch.cuda.is_initialized():
                raise HarnessError("the worker's CUDA context exists before its environment was set")
            os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        self.role, self.device, self.fp_seed = role, device, fp_seed
        self._pin(cores)
        torch.set_grad_enabled(False)
        self.ns = problem.load_namespace(problem.ProblemSource(**problem_src))
        if role == "candidate":
            extcache.install(cache_dir)
        importlib.import_module("torch._dynamo")  # it rewraps torch.manual_seed on import: snapshot after it
        if strict:
            preload_compile()
        info: dict = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda,
                      "python": sys.version.split()[0]}
        if device_now:
            info.update(self._init_device())
        settle_gc()
        return info

    def _init_device(self) -> dict:
        info: dict = {}
        if self.device == "cuda":
            wait = os.environ.get("KBH_HOST_WAIT", "spin")
            info["host_wait"] = clocks.prefer_spin_wait() if wait == "spin" else "driver default"
            torch.cuda.set_device(0)
            props = torch.cuda.get_device_properties(0)
            l2 = int(getattr(props, "L2_cache_size", 0) or 0)
            flush = max(2 * l2, 256 * 2**20)
            info.update(gpu=props.name, capability=f"{props.major}.{props.minor}",
                        sms=props.multi_processor_count, l2_bytes=l2, memory_bytes=props.total_memory)
            self.clock = clocks.CudaClock(flush)
        else:
            try:
                text = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
                llc = int(text[:-1]) * 1024 if text.endswith("K") else int(text)
            except (OSError, ValueError):
                llc = 32 * 2**20
            flush = max(2 * llc, 64 * 2**20)
            info.update(cpu_cache_bytes=llc)
            self.clock = clocks.CpuClock(flush)
        clocks.guard_flush(self.clock, self.guard)
        torch.ones(1 << 22, device=self.device).sum()
        self.sync()
        info.update(flush_bytes=flush, l2_reset=self.clock.l2_reset)
        self.fp = Fingerprinter(self.fp_seed, self.device)
        self.py_threads = {t.ident for t in threading.enumerate()}
        self.watch = RuntimeWatch(self.noted, strict=self.strict, namespaces={"problem": self.ns})
        self.watch.hold(worker=self, worker_conn=self.conn)
        return info

    def cmd_device(self, frames, poison_bytes: int = 0, holders: int = 1,
                   warm_params: dict | None = None) -> dict:
        """A spare's device, before any candidate is in it. With warm_params (a shape's), one input set is
        drawn, fingerprinted, flushed and poisoned: CUDA loads those kernels at their first launch, here."""
        if self.watch is None:
            self._init_device()
        self._poison_free_memory(poison_bytes, holders)
        if warm_params is not None:
            try:
                inputs = self.inputs_for(warm_params, 0)
                self.tensor_fps(inputs)
                self.clock.flush()
                poison([x for x in inputs if isinstance(x, torch.Tensor)])
                self.sync()
            except HarnessError as e:  # a shape whose draw fails is the reference's error to report
                return {"warm_error": str(e)[:300]}
        return {}

    def cmd_log(self, frames, path: str) -> dict:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return {}

    def cmd_load(self, frames, path: str, cores: list[int] | None = None, poison_bytes: int = 0,
                 cache_dir: str | None = None, sandbox: dict | None = None) -> dict:
        """Pin to the lane's timing core (spares start elsewhere), enter the write sandbox, then import the
        candidate (from cache_dir, its own build cache folder, under --isolate)."""
        if sandbox:
            try:
                write_sandbox.restrict(**sandbox)
            except OSError as e:
                raise HarnessError(f"the write sandbox could not be applied: {e}") from None
        if cache_dir:
            extcache.set_root(cache_dir)
        self._pin(cores)
        if self.watch is None:
            self._init_device()
        self._poison_free_memory(poison_bytes)
        module = import_candidate(path)
        settle_gc()
        self.cls = getattr(module, "ModelNew", None)
        if self.cls is None:
            raise BadOutput("no_modelnew", "candidate defines no ModelNew")
        return {"builds": [{k: v for k, v in ev.items() if k != "message"} for ev in extcache.events]}

    def cmd_setup(self, frames, params: dict, init_seed: int, compile_model: bool = False,
                  precision: str = "as_written") -> dict:
        self.params, self.precision = params, precision
        self.model = self.compiled = None
        _gc_collect()
        cls = self.ns["Model"] if self.role == "reference" else self.cls
        self.model = problem.build_model(cls, self.ns, init_seed, self.device, precision)
        if compile_model:
            dynamo_config = importlib.import_module("torch._dynamo.config")
            for attr in ("recompile_limit", "cache_size_limit"):
                if hasattr(dynamo_config, attr):
                    setattr(dynamo_config, attr, 64)
            self.compiled = torch.compile(self.model)
        self.sync()
        return {}

    def inputs(self, seed: int) -> list:
        return self.inputs_for(self.params, seed)

    def inputs_for(self, params: dict, seed: int) -> list:
        try:
            return problem.make_inputs(self.ns, params, seed, self.device, precision=self.precision)
        except Exception as e:
            if isinstance(e, torch.OutOfMemoryError) or "can't allocate memory" in str(e):
                raise HarnessError(f"the inputs do not fit: get_inputs{tuple(params.items()) or '()'} ran out of "
                                   f"memory ({free_gib(self.device):.1f} GiB free on the {self.device}): "
                                   f"{str(e).splitlines()[0][:200]}") from None
            raise HarnessError(f"drawing inputs for seed {seed} failed: {type(e).__name__}: {e}") from e

    def tensor_fps(self, xs: list) -> list[int]:
        return self.fp.exact_many([x for x in xs if isinstance(x, torch.Tensor)]).tolist()

    def extra_threads(self) -> list[str]:
        return sorted(t.name for t in threading.enumerate()
                      if t.ident not in self.py_threads and t.is_alive())

    def cmd_check(self, frames, seed: int, out_prefix: str | None = None) -> dict:
        """Under the strict sandbox a checked call meets what a timed one does: the collector off, the draw and
        every read of its outputs with the candidate's hooks off (a hook that acts only there would tell)."""
        if self.role != "reference":
            with self.quiet():
                return self._check_candidate(frames, seed, out_prefix)
        inputs = self.inputs(seed)
        # Judge and worker draw each seed apart: a redraw with new tensors filled catches a draw that returns
        # memory it never wrote or runs an op that differs run to run, before any candidate is judged on it.
        fps = self.tensor_fps(inputs)
        again = self.tensor_fps(problem.make_inputs(self.ns, self.params, seed, self.device,
                                                    fill_uninitialized=True, precision=self.precision))
        if again != fps:
            i = next((k for k, (a, b) in enumerate(zip(fps, again)) if a != b), min(len(fps), len(again)))
            raise HarnessError(f"get_inputs is not repeatable: seed {seed} drawn twice gave different bytes "
                               f"in input tensor {i} (it returns memory it never wrote, or an op differs "
                               "run to run; README, Writing a problem)")
        outs = plain_outputs(self.model(*inputs))
        self.sync()
        frames.extend(as_bytes(o) for o in outs)
        return {"outputs": [tensor_meta(o) for o in outs], "input_fps": fps,
                "input_bytes": tensor_bytes(inputs)}

    def _check_candidate(self, frames, seed: int, out_prefix: str | None) -> dict:
        with self.guard():
            inputs = self.inputs(seed)
        threads_before = native_threads()
        if not self.strict:
            _set_det(True, warn_only=True)
        try:
            out = self.model(*inputs)
        finally:
            det_kept = self.strict or _det_enabled()
            _set_det(False)
        with self.guard():
            threads_after = native_threads()
            py_threads = self.extra_threads()
            outs = plain_outputs(out)
            del out
            self.returned = [r for r in self.returned if r() is not None]  # earlier outputs still held
            live = {storage_span(r())[0] for r in self.returned if r().numel()}
            reused = any(storage_span(o)[0] in live for o in outs if o.numel())  # returned again: a replay
            fp_now = self.tensor_fps(outs)
            self.sync()
            fp_later = self.tensor_fps(outs)
            metas = [{**tensor_meta(o), "file": f"{out_prefix}.{i}.bin"} for i, o in enumerate(outs)]
            for o, meta in zip(outs, metas):
                self.slots.write(o, meta["file"])
            alias = aliases(outs, inputs)
            poison(outs)
            self.sync()
            self.returned.extend(weakref.ref(o) for o in outs)
            return {"outputs": metas, "input_fps": self.tensor_fps(inputs), "late_write": fp_now != fp_later,
                    "aliases_input": alias, "deterministic_kept": det_kept, "reused_output": reused,
                    "threads": [threads_before, threads_after], "extra_py_threads": py_threads}

    def cmd_fingerprints(self, frames, seeds: list[int], projection: bool = False,
                         tolerances: dict | None = None) -> dict:
        """Reference fingerprints of the inputs and outputs for these seeds."""
        if self.role != "reference":
            raise HarnessError("fingerprints come from the reference worker only")
        tol = tolerances or {}

        def project(o: torch.Tensor) -> list:
            atol, rtol = tol.get(str(o.dtype).replace("torch.", ""), tol.get("default", (0, 0)))
            return self.fp.projection(o, atol, rtol).tolist()

        result = []
        for seed in seeds:
            inputs = self.inputs(seed)
            ins = self.tensor_fps(inputs)
            outs = plain_outputs(self.model(*inputs))
            projs = [project(o) for o in outs] if projection else None
            result.append([self.tensor_fps(outs), projs, ins])
        return {"fingerprints": result}

    def cmd_kernels(self, frames, seed: int) -> dict:
        """The GPU kernels one forward launches, by the names the profiler gives them: evidence for the flag on
        a candidate whose own kernels never run (torch doing the work)."""
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        inputs = self.inputs(seed)
        self.sync()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            out = self.model(*inputs)
            self.sync()
        del out
        names = sorted({e.name for e in prof.events() if e.device_type == DeviceType.CUDA})
        return {"kernels": [n[:300] for n in names[:500]]}

    def cmd_ping(self, frames) -> dict:
        return {}

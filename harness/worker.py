"""Worker process: runs the reference or one candidate on one device, on the judge's commands.

Everything it sends is evidence for the judge; no verdict is decided here. Messages are JSON over a
private socket; the reference's outputs follow as raw byte frames, a candidate's are written to files
the judge names. Nothing that comes out of a candidate's process is ever unpickled.

Run as `python -m harness.worker FD`. The harness modules and every primitive they use are bound
before the candidate is imported; the worker reports any later change to them.
"""

from __future__ import annotations

import builtins
import ctypes
import gc
import importlib
import json
import os
import sys
import threading
import time
import traceback
import types
import weakref
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch

from . import extcache, problem, timing
from .build_worker import import_candidate
from .envinfo import process_age_s
from .fingerprint import OVERWRITTEN, Fingerprinter
from .seeds import derive

_type = type
_Tensor = torch.Tensor
_perf_ns = time.perf_counter_ns
_listdir = os.listdir
_set_det = torch.use_deterministic_algorithms
_det_enabled = torch.are_deterministic_algorithms_enabled
_gc_collect = gc.collect
_perf = time.perf_counter
_gc_freeze = gc.freeze


class BadOutput(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class HarnessError(Exception):
    """A problem with the problem file or the harness, not with the candidate."""


def plain_outputs(out: Any) -> list[torch.Tensor]:
    """The output as a list of plain dense tensors, or BadOutput naming what it was instead."""
    if _type(out) is _Tensor:
        outs = [out]
    elif _type(out) in (tuple, list) and all(_type(o) is _Tensor for o in out):
        outs = list(out)
    else:
        kinds = [out] if _type(out) not in (tuple, list) else [o for o in out if _type(o) is not _Tensor]
        what = ", ".join(sorted({f"{_type(o).__module__}.{_type(o).__qualname__}" for o in kinds}))
        raise BadOutput("not_plain_tensor", f"forward returned {what}, not a plain torch.Tensor")
    for o in outs:
        if o.layout != torch.strided or o.is_meta or o.is_nested or o.is_quantized:
            raise BadOutput("not_plain_tensor", f"forward returned a {o.layout} tensor, not a plain dense one")
    return outs


def tensor_meta(t: torch.Tensor) -> dict:
    return {"dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape), "device": t.device.type,
            "nbytes": t.numel() * t.element_size()}


def as_bytes(t: torch.Tensor):
    c = t.detach().contiguous().reshape(-1)
    if c.device.type != "cpu":
        c = c.cpu()
    return c.view(torch.uint8).numpy()


class OutputSlots:
    """Files the judge maps, one per output index, reused across checks and page-locked once, so a
    device output lands in them in one direct copy at full PCIe speed."""

    def __init__(self):
        self.slots: dict[str, tuple[int, torch.Tensor]] = {}

    def write(self, t: torch.Tensor, path: str) -> None:
        src = t.detach().contiguous().reshape(-1).view(torch.uint8)
        n = src.numel()
        cap, buf = self.slots.get(path, (0, None))
        if buf is None or cap < n:
            self._release(path)
            cap = max(n, 1)
            with open(path, "wb") as f:
                f.truncate(cap)
            buf = torch.from_file(path, shared=True, size=cap, dtype=torch.uint8)
            if src.is_cuda and _cudart() is not None:
                if _cudart().cudaHostRegister(ctypes.c_void_p(buf.data_ptr()), ctypes.c_size_t(cap), 0) != 0:
                    _cudart().cudaGetLastError()
            self.slots[path] = (cap, buf)
        if n:
            buf[:n].copy_(src)

    def _release(self, path: str) -> None:
        cap, buf = self.slots.pop(path, (0, None))
        if buf is not None and torch.cuda.is_initialized() and _cudart() is not None:
            if _cudart().cudaHostUnregister(ctypes.c_void_p(buf.data_ptr())) != 0:
                _cudart().cudaGetLastError()


_CUDART: list = []


def _cudart():
    """The CUDA runtime torch loaded, through ctypes (its errors cleared here, never left for a candidate)."""
    if not _CUDART:
        _CUDART.append(timing._find_cudart())
    return _CUDART[0]


def poison(outs: list[torch.Tensor]) -> None:
    """Fill released outputs with 0xFF (NaN for floats), so no later call finds a stale answer."""
    for o in outs:
        if o.is_contiguous() and o.numel():
            o.detach().reshape(-1).view(torch.uint8).fill_(255)


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.data_ptr() + s.nbytes()


def aliases(outs: list[torch.Tensor], inputs: list) -> bool:
    spans = [storage_span(x) for x in inputs if isinstance(x, torch.Tensor) and x.numel()]
    for o in outs:
        if not o.numel():
            continue
        lo, hi = storage_span(o)
        if any(lo < xh and xl < hi for xl, xh in spans):
            return True
    return False


def _age() -> float | None:
    """Seconds since this process started: when a worker's imports ended and its first command came, for the
    run's start-up timeline (run.json `devices`)."""
    age = process_age_s()
    return round(age, 2) if age is not None else None


def settle_gc() -> None:
    """Move everything alive now (torch, the problem, the candidate's module) out of the collector's reach, so
    the collection each shape's setup makes to free the previous model scans only what came after: with torch
    and dynamo imported a full collection took 0.17 s on the CPU machine, after this 10 us."""
    _gc_collect()
    _gc_freeze()


def native_threads() -> int:
    try:
        return len(_listdir("/proc/self/task"))
    except OSError:
        return -1


class RuntimeWatch:
    """Identity of every callable the harness relies on, to report what a candidate replaced."""

    def __init__(self):
        self.snapshot = {name: self._callables(obj) for name, obj in self._targets().items()}
        self.modules = [n for n in sys.modules if n == "harness" or n.startswith("harness.")]

    @staticmethod
    def _targets() -> dict[str, Any]:
        targets: dict[str, Any] = {
            "time": time, "builtins": builtins, "os": os, "gc": gc, "threading": threading,
            "torch": torch, "torch.Tensor": torch.Tensor, "torch.TensorBase": torch.Tensor.__mro__[1],
            "torch.testing": torch.testing, "torch.nn.Module": torch.nn.Module,
            "torch.utils.cpp_extension": sys.modules.get("torch.utils.cpp_extension"),
        }
        if torch.cuda.is_available():
            targets.update({"torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event,
                            "torch.cuda.EventBase": torch.cuda.Event.__mro__[1]})
        for name, mod in list(sys.modules.items()):
            if name == "harness" or name.startswith("harness."):
                targets[name] = mod
                for attr, value in vars(mod).items():
                    if isinstance(value, type) and value.__module__ == name:
                        targets[f"{name}.{attr}"] = value
        return {k: v for k, v in targets.items() if v is not None}

    @staticmethod
    def _callables(obj: Any) -> dict[str, Any]:
        return {k: v for k, v in vars(obj).items()
                if callable(v) or isinstance(v, (types.ModuleType, staticmethod, classmethod))}

    def changed(self) -> list[str]:
        out = []
        for name, obj in self._targets().items():
            before = self.snapshot.get(name)
            if before is None:
                continue
            now = vars(obj)
            out.extend(f"{name}.{k}" for k, v in before.items() if now.get(k) is not v)
        out.extend(f"sys.modules[{name}]" for name in self.modules if sys.modules.get(name) is None)
        return sorted(out)[:20]


def _llc_bytes() -> int:
    try:
        text = Path("/sys/devices/system/cpu/cpu0/cache/index3/size").read_text().strip()
        return int(text[:-1]) * 1024 if text.endswith("K") else int(text)
    except (OSError, ValueError):
        return 32 * 2**20


class _EmptyModel(torch.nn.Module):
    """The thinnest candidate: a module whose forward launches one one-element kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.add_(1)


class _ReadModel(torch.nn.Module):
    """The floor of a call whose output shape depends on device data: one value read to the host, one launch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.item()
        return x.add_(1)


class _CopyModel(torch.nn.Module):
    """A device-to-device copy moving `nbytes` (half read, half written) into a fresh output, as a
    candidate allocates its own."""

    def __init__(self, nbytes: int, device: str):
        super().__init__()
        self.src = torch.empty(max(nbytes // 2, 1), dtype=torch.uint8, device=device).random_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(self.src).copy_(self.src)


FLOOR_MODELS = {"launch": _EmptyModel, "launch_read": _ReadModel, "copy": _CopyModel}
STOCK_SETS = 16
STOCK_BYTES = {"cuda": 8 * 2**30, "cpu": 1 * 2**30}


def tensor_bytes(xs: list) -> int:
    return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))


def stock_sets(device: str, per_set: int) -> int:
    """How many input sets (with their outputs) to draw at once: up to STOCK_SETS, within STOCK_BYTES and a
    quarter of the device's free memory."""
    budget = STOCK_BYTES.get(device, STOCK_BYTES["cpu"])
    if device == "cuda":
        budget = min(budget, torch.cuda.mem_get_info()[0] // 4)
    return max(1, min(STOCK_SETS, budget // max(per_set, 1)))


def poison_size(free: int, nbytes: int, holders: int = 1) -> int:
    """A poisoned block's size: nbytes, and at most a quarter of the free memory shared among the `holders` that
    may keep one at once (a lane's idle spares each keep theirs in their caching allocator), so on a small GPU
    the worker being evaluated still finds most of the memory free."""
    return max(0, min(nbytes, free // (4 * max(1, holders))))


class TimedFeed:
    """Inputs and verification for a timing loop. Call i runs on seed derive(base_seed, i)'s inputs, each
    set used by one call only. Sets are drawn up to STOCK_SETS at a time ahead of the calls that use them,
    and (when verifying) every call's outputs are held until its batch ends; then each call of the batch is
    fingerprinted (outputs, and inputs to catch mutation), its outputs and inputs are poisoned, and all are
    released. So between two calls of a batch the host only flushes and syncs: a call right after host work
    measured up to ~100 us slower on the H200 (docs/benchmarks.md). The call right after a draw is made and
    verified, not sampled. Work a call leaves running on another stream is still caught when it returns:
    the host's full sync waits for it, past the last event (`work_outside_timing`).

    A candidate that returns the same storage from call to call (a reused output buffer) has overwritten
    the held outputs of its earlier calls: those calls are reported as OVERWRITTEN (the judge does not
    sample them) and every later call is fingerprinted, then poisoned, right after it returns.

    With draw False (the floors' stand-ins, which ignore their inputs) every call gets no inputs, and the
    batches keep their size and their settling: the calls sampled are made exactly as with draws, which only
    ever precede a batch's first call, and that call is not sampled."""

    def __init__(self, worker: Worker, base_seed: int, projection: bool | None, draw: bool = True):
        self.w = worker
        self.base = base_seed
        self.verify = projection is not None
        self.projection = bool(projection)
        self.draw = draw
        self.sets: dict[int, list] = {0: worker.inputs(derive(base_seed, 0)) if draw else []}
        self.in_bytes = tensor_bytes(self.sets[0])
        self.pending: list[tuple[int, list, list[torch.Tensor], set[int]]] = []  # call, inputs, outputs, storages
        self.calls: dict[int, tuple] = {}
        self.k = 0
        self.out_bytes = 0
        self.immediate = False

    def _batch_size(self) -> int:
        return stock_sets(self.w.device, self.in_bytes + self.out_bytes)

    def take(self, i: int) -> tuple[list, bool]:
        """Call i's inputs, and whether call i may be sampled."""
        fresh = i not in self.sets
        if fresh:
            self.settle()
            self.k = self.k or self._batch_size()
            self.sets = {j: self.w.inputs(derive(self.base, j)) if self.draw else [] for j in range(i, i + self.k)}
        return self.sets.pop(i), i > 0 and (self.k == 1 or not fresh)

    def hold(self, i: int, args: list, out: Any) -> None:
        outs = plain_outputs(out)
        self.out_bytes = max(self.out_bytes, tensor_bytes(outs))
        if not self.verify:
            return
        mine = {storage_span(o)[0] for o in outs if o.numel()}
        reused = [p for p in self.pending if p[3] & mine]
        for p in reused:
            self.calls[p[0]] = OVERWRITTEN
            self.pending.remove(p)
        self.immediate = self.immediate or bool(reused)
        self.pending.append((i, args, outs, mine))
        if self.immediate:
            self.settle()

    def settle(self) -> None:
        """Fingerprint every held call of the batch (all its tensors in one exact_many, read back at once),
        then poison and release them."""
        if not self.pending:
            return
        fp = self.w.fp
        tensors, spans = [], []
        for _, args, outs, _ in self.pending:
            ins = [x for x in args if isinstance(x, torch.Tensor)]
            spans.append((len(tensors), len(outs), len(ins)))
            tensors += outs + ins
        exact = fp.exact_many(tensors).tolist()
        for (i, _, outs, _), (at, n_out, n_in) in zip(self.pending, spans):
            projs = torch.stack([fp.projection(o) for o in outs]).tolist() if self.projection else None
            self.calls[i] = (exact[at:at + n_out], projs, exact[at + n_out:at + n_out + n_in])
            poison(tensors[at:at + n_out + n_in])
        self.pending.clear()


class Worker:
    def __init__(self, conn: Connection, ready_s: float | None = None):
        self.conn = conn
        self.ready_s = ready_s
        self.role = "reference"
        self.device = "cpu"
        self.watch: RuntimeWatch | None = None
        self.poisoned = False
        self.cls: Any = None
        self.model: Any = None
        self.compiled: Any = None
        self.params: dict = {}
        self.py_threads: set[int] = set()
        self.slots = OutputSlots()
        self.returned: list = []

    # -- transport ---------------------------------------------------------------------------
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
                reply = getattr(self, f"cmd_{cmd}")(frames=frames, **msg) or {}
                reply = {"ok": True, **reply}
            except BadOutput as e:
                reply = {"ok": False, "bad_output": e.kind, "message": str(e)}
            except HarnessError as e:
                reply = {"ok": False, "harness_error": True, "message": str(e)}
            except BaseException as e:
                traceback.print_exc()
                text = f"{type(e).__name__}: {e}"
                reply = {"ok": False, "error": type(e).__name__, "message": text[:4000],
                         "cuda_error": "CUDA" in text or "cuda" in type(e).__name__.lower()
                         or "AcceleratorError" in type(e).__name__}
                frames = []
            if self.watch is not None:
                reply["patched"] = self.watch.changed()
            reply["worker_s"] = round(_perf() - t0, 4)
            sys.stdout.flush()
            sys.stderr.flush()
            self.send(reply)
            for f in frames:
                self.conn.send_bytes(f)

    # -- set-up ------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _pin(self, cores: list[int] | None) -> None:
        """Pinned lanes get one thread per core. Unpinned CPU workers run one thread: they share the host's
        cores with builds and spare workers, and a call's parallel threads waiting at a barrier for a
        preempted sibling measured 16 ms instead of 0.45 ms (docs/benchmarks.md)."""
        if cores:
            os.sched_setaffinity(0, cores)
            torch.set_num_threads(len(cores))
        elif self.device == "cpu":
            torch.set_num_threads(1)

    def _poison_free_memory(self, nbytes: int, holders: int = 1) -> None:
        """Fill a large block with 0xFF and release it to the caching allocator: later allocations carved
        from it read as NaN (floats) or -1 (ints) until written."""
        if nbytes and self.device == "cuda" and not self.poisoned:
            self.poisoned = True
            free, _ = torch.cuda.mem_get_info()
            block = torch.empty(poison_size(free, nbytes, holders), dtype=torch.uint8, device="cuda").fill_(255)
            del block
            torch.cuda.synchronize()

    def cmd_init(self, frames, role: str, device: str, problem_src: dict, fp_seed: int, cache_dir: str,
                 cores: list[int] | None = None, device_now: bool = True, env: dict | None = None,
                 cwd: str | None = None) -> dict:
        """Everything that needs no device; the device itself too when device_now. A spare candidate worker
        starts without it and gets it from `device`, sent in the device's turn: a CUDA context created while
        another candidate is being timed on the same GPU would share the GPU with it and slow its timed calls.
        env (the lane's CUDA_VISIBLE_DEVICES, cache folders) is applied first, before anything reads it: a worker
        started early, before its lane was known, gets it here, and the run's private scratch folder as cwd."""
        started = _perf()
        stamps = {"waited_from_s": self.ready_s, "init_at_s": _age()}
        if env:
            if torch.cuda.is_initialized():
                raise HarnessError("the worker's CUDA context exists before its environment was set")
            os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        self.role, self.device = role, device
        self.fp_seed = fp_seed
        self._pin(cores)
        torch.set_grad_enabled(False)
        self.ns = problem.load_namespace(problem.ProblemSource(**problem_src))
        if role == "candidate":
            extcache.install(cache_dir)
        importlib.import_module("torch._dynamo")  # it rewraps torch.manual_seed on import: snapshot after it
        info: dict = {"torch": torch.__version__, "cuda_runtime": torch.version.cuda, "python": sys.version.split()[0]}
        stamps["before_device_s"] = round(_perf() - started, 3)
        if device_now:
            info.update(self._init_device())
        settle_gc()
        stamps["init_s"] = round(_perf() - started, 3)
        info["start_s"] = stamps
        return info

    def _init_device(self) -> dict:
        info: dict = {}
        if self.device == "cuda":
            wait = os.environ.get("KBH_HOST_WAIT", "spin")
            info["host_wait"] = timing.prefer_spin_wait() if wait == "spin" else "driver default"
            torch.cuda.set_device(0)
            props = torch.cuda.get_device_properties(0)
            l2 = int(getattr(props, "L2_cache_size", 0) or 0)
            flush = max(2 * l2, 256 * 2**20)
            info.update(gpu=props.name, capability=f"{props.major}.{props.minor}", sms=props.multi_processor_count,
                        l2_bytes=l2, memory_bytes=props.total_memory)
            self.clock = timing.CudaClock("cuda", flush)
        else:
            llc = _llc_bytes()
            flush = max(2 * llc, 64 * 2**20)
            info.update(cpu_cache_bytes=llc)
            self.clock = timing.CpuClock(flush)
        torch.ones(1 << 22, device=self.device).sum()
        self.sync()
        info.update(flush_bytes=flush, l2_reset=self.clock.l2_reset)
        self.fp = Fingerprinter(self.fp_seed, self.device)
        self.py_threads = {t.ident for t in threading.enumerate()}
        self.watch = RuntimeWatch()
        info["native_threads"] = native_threads()
        return info

    def _ensure_device(self) -> None:
        if self.watch is None:
            self._init_device()

    def cmd_device(self, frames, poison_bytes: int = 0, holders: int = 1, warm_params: dict | None = None) -> dict:
        """Start the device in a spare, before any candidate is in it, and poison its free memory: the harness
        sends this inside the device's turn, so the context is never created while another process is being
        timed, and a candidate's import waits for neither. With warm_params (a shape's), one input set is drawn,
        fingerprinted, flushed and poisoned, then dropped: the kernels a record's first check and first timed
        calls use are loaded here (CUDA loads a kernel at its first launch), not inside the record."""
        self._ensure_device()
        self._poison_free_memory(poison_bytes, holders)
        if warm_params is not None:
            try:
                inputs = self.inputs_for(warm_params, 0)
                self.tensor_fps(inputs)
                self.clock.flush()
                poison([x for x in inputs if isinstance(x, torch.Tensor)])
                self.sync()
                del inputs
            except HarnessError as e:  # best effort: a shape whose draw fails is the reference's error to report
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
                 cache_dir: str | None = None) -> dict:
        """Move to the lane's timing core (spares start elsewhere), start the device, poison free memory,
        then import the candidate (from cache_dir, its own folder of the build cache, under --isolate)."""
        if cache_dir:
            extcache.set_root(cache_dir)
        self._pin(cores)
        self._ensure_device()
        self._poison_free_memory(poison_bytes)
        module = import_candidate(path)
        settle_gc()
        self.cls = getattr(module, "ModelNew", None)
        if self.cls is None:
            raise BadOutput("no_modelnew", "candidate defines no ModelNew")
        return {"builds": [{k: v for k, v in ev.items() if k != "message"} for ev in extcache.events]}

    def cmd_setup(self, frames, params: dict, init_seed: int, compile_model: bool = False) -> dict:
        self.params = params
        self.model = self.compiled = None
        _gc_collect()
        cls = self.ns["Model"] if self.role == "reference" else self.cls
        self.model = problem.build_model(cls, self.ns, init_seed, self.device)
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
            return problem.make_inputs(self.ns, params, seed, self.device)
        except Exception as e:
            raise HarnessError(f"drawing inputs for seed {seed} failed: {type(e).__name__}: {e}") from e

    def check_repeatable(self, seed: int, fps: list[int]) -> None:
        """The judge and the candidate's worker draw each seed apart, so a draw must repeat bit for bit. The
        reference draws each check seed again with torch's fill of new tensors on: a draw that returns memory
        it never wrote, or runs an op that differs run to run, gives other bytes, and fails here with one line
        before any candidate is judged on it."""
        again = self.tensor_fps(problem.make_inputs(self.ns, self.params, seed, self.device, fill_uninitialized=True))
        if again != fps:
            i = next((k for k, (a, b) in enumerate(zip(fps, again)) if a != b), min(len(fps), len(again)))
            raise HarnessError(f"get_inputs is not repeatable: seed {seed} drawn twice gave different bytes in "
                               f"input tensor {i} (it returns memory it never wrote, or an op differs run to run; "
                               "README, Problems)")

    def tensor_fps(self, xs: list) -> list[int]:
        return self.fp.exact_many([x for x in xs if isinstance(x, torch.Tensor)]).tolist()

    def extra_threads(self) -> list[str]:
        return sorted(t.name for t in threading.enumerate() if t.ident not in self.py_threads and t.is_alive())

    # -- correctness -------------------------------------------------------------------------
    def cmd_check(self, frames, seed: int, out_prefix: str | None = None) -> dict:
        inputs = self.inputs(seed)
        if self.role == "reference":
            in_fps = self.tensor_fps(inputs)
            self.check_repeatable(seed, in_fps)
            outs = plain_outputs(self.model(*inputs))
            self.sync()
            frames.extend(as_bytes(o) for o in outs)
            in_bytes = sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
            return {"outputs": [tensor_meta(o) for o in outs], "input_fps": in_fps, "input_bytes": in_bytes}
        threads_before = native_threads()
        _set_det(True, warn_only=True)
        try:
            out = self.model(*inputs)
        finally:
            det_kept = _det_enabled()
            _set_det(False)
        threads_after = native_threads()
        py_threads = self.extra_threads()
        outs = plain_outputs(out)
        del out
        reused = any(storage_span(o)[0] in self.live_outputs() for o in outs if o.numel())
        fp_now = self.tensor_fps(outs)
        self.sync()
        fp_later = self.tensor_fps(outs)
        metas = []
        for i, o in enumerate(outs):
            meta = tensor_meta(o)
            meta["file"] = f"{out_prefix}.{i}.bin"
            self.slots.write(o, meta["file"])
            metas.append(meta)
        alias = aliases(outs, inputs)
        poison(outs)
        self.sync()
        self.returned.extend(weakref.ref(o) for o in outs)
        return {"outputs": metas, "input_fps": self.tensor_fps(inputs), "late_write": fp_now != fp_later,
                "aliases_input": alias, "deterministic_kept": det_kept, "reused_output": reused,
                "threads": [threads_before, threads_after], "extra_py_threads": py_threads}

    def live_outputs(self) -> set[int]:
        """Storages of earlier outputs the candidate still holds: returning one again is replaying it."""
        self.returned = [r for r in self.returned if r() is not None]
        return {storage_span(r())[0] for r in self.returned if r().numel()}

    # -- timing ------------------------------------------------------------------------------
    def _fixed_buffers(self, base_seed: int) -> tuple[list, Any]:
        """For graph replays and the judge's clock, which need fixed buffers: call 0's inputs, and refill(i),
        which copies call i's inputs (drawn in batches by TimedFeed, each used once) into them and says
        whether call i may be sampled."""
        feed = TimedFeed(self, base_seed, None)
        bufs, _ = feed.take(0)
        tensor_idx = [j for j, x in enumerate(bufs) if isinstance(x, torch.Tensor)]

        def refill(i: int) -> bool:
            if i == 0:
                return True
            new, counted = feed.take(i)
            for j, x in enumerate(new):
                if j in tensor_idx:
                    if x.shape != bufs[j].shape or x.dtype != bufs[j].dtype:
                        raise HarnessError("get_inputs returned inputs of different shapes for different seeds; "
                                           "timing refills fixed buffers and needs fixed input shapes")
                    bufs[j].copy_(x)
                else:
                    bufs[j] = x
            return counted

        return bufs, refill

    def _verifier(self, bufs: list, projection: bool):
        """For graph replays, which rewrite one output: fingerprints of every call's output and inputs right
        after the call, kept on the device until the loop ends; the output is poisoned after."""
        tensors = [x for x in bufs if isinstance(x, torch.Tensor)]

        def after(out: Any):
            outs = plain_outputs(out)
            exact = self.fp.exact_many(outs + tensors)
            projs = torch.stack([self.fp.projection(o) for o in outs]) if projection else None
            return outs, exact[:len(outs)], projs, exact[len(outs):] if tensors else None

        calls: dict[int, tuple] = {}

        def on_call(i: int, out: Any, extra: Any) -> None:
            outs, fps, projs, ins = extra
            calls[i] = (fps, projs, ins)
            poison(outs)

        return after, on_call, calls

    @staticmethod
    def _calls_json(calls: dict[int, tuple | str]) -> dict[str, list | str]:
        def plain(x):
            return x.tolist() if isinstance(x, torch.Tensor) else x

        return {str(i): c if c == OVERWRITTEN else [plain(c[0]), plain(c[1]), plain(c[2]) if c[2] is not None else []]
                for i, c in calls.items()}

    def cmd_time(self, frames, base_seed: int, loop: dict, verify: bool, projection: bool = False,
                 compiled: bool = False, floor: str | None = None, floor_bytes: int = 0) -> dict:
        """Time the model; with floor, time a stand-in that ignores the inputs (FLOOR_MODELS) through the
        same loop, flush, batches and verification included, so the floor carries the same between-call
        costs; it draws no inputs (TimedFeed's draw), which only cost wall time before unsampled calls."""
        model = self.compiled if compiled else self.model
        if floor is not None:
            kind = FLOOR_MODELS[floor]
            stand_in = kind(floor_bytes, self.device) if kind is _CopyModel else kind()
            one = torch.zeros(1, device=self.device)
            model = lambda *_: stand_in(one)  # noqa: E731
        feed = TimedFeed(self, base_seed, projection if verify else None, draw=floor is None)
        current: list = []

        def step(i: int):
            args, counted = feed.take(i)
            current[:] = [args]
            return (lambda: model(*args)), counted

        def on_call(i: int, out: Any, extra: Any) -> None:
            feed.hold(i, current[0], out)

        threads_before = native_threads()
        samples, unsampled = timing.run_loop(self.clock, step, lambda out: None, on_call,
                                             timing.LoopSettings(**loop))
        feed.settle()
        return {"device_us": [s.device_us for s in samples], "host_us": [s.host_us for s in samples],
                "span_us": [s.span_us for s in samples], "sample_calls": [s.call for s in samples],
                "unsampled": unsampled,
                "calls": self._calls_json(feed.calls), "threads": [threads_before, native_threads()],
                "extra_py_threads": self.extra_threads()}

    def cmd_warm(self, frames, base_seed: int, calls: int, compiled: bool = False) -> dict:
        """Untimed first calls (torch.compile's compile happens in the first): outside the device's turn, so spares
        may start their device meanwhile."""
        model = self.compiled if compiled else self.model
        for i in range(calls):
            out = model(*self.inputs(derive(base_seed, i)))
            del out
        self.sync()
        return {}

    def cmd_graph(self, frames, base_seed: int, loop: dict, projection: bool = False) -> dict:
        """Device time without launch gaps: capture one call in a CUDA graph and time its replays."""
        if self.device != "cuda":
            return {"graph_ok": False, "message": "graphs need CUDA"}
        bufs, refill = self._fixed_buffers(base_seed)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):
                self.model(*bufs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                static_out = self.model(*bufs)
            plain_outputs(static_out)
        except BadOutput:
            raise
        except Exception as e:
            torch.cuda.synchronize()
            return {"graph_ok": False, "message": f"capture failed: {type(e).__name__}: {str(e)[:300]}"}
        after_v, on_call, calls = self._verifier(bufs, projection)

        def step(i: int):
            return graph.replay, refill(i)

        samples, unsampled = timing.run_loop(self.clock, step, lambda _: after_v(static_out), on_call,
                                             timing.LoopSettings(**loop))
        return {"graph_ok": True, "device_us": [s.device_us for s in samples], "unsampled": unsampled,
                "calls": self._calls_json(calls)}

    def cmd_judge_timed(self, frames, base_seed: int, rounds: int) -> dict:
        """Calls the judge times with its own clock: ready -> go -> call + full sync -> done."""
        bufs, refill = self._fixed_buffers(base_seed)
        for k in range(rounds):
            refill(k)
            self.clock.flush()
            self.sync()
            self.send({"ready": k})
            go = self.recv().get("go")
            if go == "call":
                out = self.model(*bufs)
                self.sync()
                del out
            self.send({"done": k})
        return {}

    def cmd_fingerprints(self, frames, seeds: list[int], projection: bool = False,
                         tolerances: dict | None = None) -> dict:
        """Reference fingerprints of the inputs and outputs for these seeds (reference role only)."""
        if self.role != "reference":
            raise HarnessError("fingerprints come from the reference worker only")
        tolerances = tolerances or {}
        result = []
        for seed in seeds:
            inputs = self.inputs(seed)
            ins = self.tensor_fps(inputs)
            outs = plain_outputs(self.model(*inputs))
            projs = None
            if projection:
                projs = []
                for o in outs:
                    atol, rtol = tolerances.get(str(o.dtype).replace("torch.", ""), tolerances.get("default", (0, 0)))
                    projs.append(self.fp.projection(o, atol, rtol).tolist())
            result.append([self.tensor_fps(outs), projs, ins])
        return {"fingerprints": result}

    # -- calibration -------------------------------------------------------------------------
    def cmd_calibrate(self, frames, loop: dict) -> dict:
        s = timing.LoopSettings(**loop)

        def median(xs: list[float]) -> float:
            return sorted(xs)[len(xs) // 2]

        def median_of(fn) -> float:
            samples, _ = timing.run_loop(self.clock, lambda i: (fn, True), lambda o: None, lambda *a: None, s)
            return median([x.device_us for x in samples])

        one = torch.zeros(1, device=self.device)
        count = torch.ones(1, dtype=torch.int32, device=self.device)
        empty = _EmptyModel()
        samples, _ = timing.run_loop(self.clock, lambda i: ((lambda: empty(one)), True), lambda o: None,
                                     lambda *a: None, s)
        result = {"empty_launch_us": median([x.device_us for x in samples]),
                  "host_gap_us": median([x.host_us - x.span_us for x in samples])}
        result["read_us"] = median_of(lambda: count.item()) if self.device == "cuda" else 0.0
        nbytes = 1 << 30 if self.device == "cuda" else 1 << 28
        src = torch.empty(nbytes, dtype=torch.uint8, device=self.device).random_()
        dst = torch.empty_like(src)
        copy_us = median_of(lambda: dst.copy_(src))
        result.update(copy_bytes=2 * nbytes, copy_us=copy_us, copy_gbps=2 * nbytes / copy_us / 1e3)
        return result

    def cmd_ping(self, frames) -> dict:
        return {}


def main(fd: int | None = None) -> None:
    """Serve the judge on the connection FD (argv[1] when run as a module; the fork server passes it)."""
    conn = Connection(int(sys.argv[1]) if fd is None else fd)
    importlib.import_module("torch._dynamo")  # before the first command: a worker started early imports it meanwhile
    Worker(conn, _age()).serve()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

"""What a worker watches in its own process: the callables the harness relies on, threads, the collector. It
runs beside candidate code, so a clean report is evidence, never a verdict."""

import builtins
import contextlib
import functools
import gc
import importlib
import inspect
import json
import os
import random
import signal
import sys
import threading
import time
import types
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

_listdir = os.listdir
_gc_collect = gc.collect
_gc_freeze = gc.freeze
_gc_isenabled, _gc_enable, _gc_disable = gc.isenabled, gc.enable, gc.disable
_GC_CALLBACKS = gc.callbacks  # the list the collector calls: rebinding gc.callbacks later does not replace it
_getsignal, _SIGNALS = signal.getsignal, sorted(signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP})
_PROFILE_EVENTS = frozenset({"sys.setprofile", "sys.settrace", "sys._setprofileallthreads", "sys._settraceallthreads"})
_getprofile, _setprofile, _gettrace, _settrace = sys.getprofile, sys.setprofile, sys.gettrace, sys.settrace
_monitoring = getattr(sys, "monitoring", None)
_fn_modes = torch._C._len_torch_function_stack
_pop_fn_mode = torch._C._pop_torch_function_stack
_push_fn_mode = torch._C._push_on_torch_function_stack
_dispatch_modes = torch._C._len_torch_dispatch_stack
_pre_dispatch_modes = torch._ops._len_torch_dispatch_stack_pre_dispatch


class hooks_off:  # noqa: N801  (used as a function: `with hooks_off():`)
    """No code a candidate installed runs while the harness draws inputs or reads outputs: its torch function
    and dispatch modes, its profile and trace functions and its sys.monitoring events are off meanwhile and
    back after, for its own calls. A hook that does a call's work when the harness first touches the output,
    after the clock has stopped, or that sees the next inputs as they are drawn, sees nothing. The harness's
    own modes (`torch.device` around a draw) work inside. About 1 us where the candidate installed none.
    A profile or trace function, or monitoring events, found here are added to `noted` (reported as a patched
    runtime): no honest kernel sets them, and setting them off raises an audit event, which an audit hook (that
    nothing removes) could use to act after the clock. Where none is set, nothing here raises one."""

    __slots__ = ("noted", "prof", "trace", "events", "modes", "dispatch")

    def __init__(self, noted: set[str]):
        self.noted = noted

    def __enter__(self) -> None:
        self.prof, self.trace = _getprofile(), _gettrace()
        if self.prof is not None or self.trace is not None:
            self.noted.add("sys.setprofile or sys.settrace (a function set around timed calls)")
            _setprofile(None)
            _settrace(None)
        self.events = {}
        if _monitoring is not None:
            for tool in range(6):
                if _monitoring.get_tool(tool) is not None and _monitoring.get_events(tool):
                    self.noted.add("sys.monitoring (events set around timed calls)")
                    self.events[tool] = _monitoring.get_events(tool)
                    _monitoring.set_events(tool, 0)
        self.modes = []
        while _fn_modes() > 0:
            self.modes.append(_pop_fn_mode())
        self.dispatch = None
        if _dispatch_modes() or _pre_dispatch_modes():
            self.dispatch = _disable_current_modes()
            self.dispatch.__enter__()

    def __exit__(self, *exc) -> None:
        if self.dispatch is not None:
            self.dispatch.__exit__(None, None, None)
        for m in reversed(self.modes):
            _push_fn_mode(m)
        for tool, ev in self.events.items():
            with contextlib.suppress(ValueError):
                _monitoring.set_events(tool, ev)
        if self.prof is not None or self.trace is not None:
            _settrace(self.trace)
            _setprofile(self.prof)


class quiet_loop:  # noqa: N801  (used as a function: `with quiet_loop():`)
    """For a whole timed command, as timeit does: the cyclic collector off and its callbacks set aside. Else a
    collection that the harness's own allocations set off would run the candidate's callbacks or its garbage's
    finalizers between the harness's steps, once the clock has stopped, and finish a call's work unseen. Only
    the candidate's calls run meanwhile, so a collector found on again or a callback added is theirs: it is
    added to the audit's `noted`, as is any profile or trace function set meanwhile. All is put back."""

    __slots__ = ("audit", "enabled", "callbacks")

    def __init__(self, audit: "ProfileAudit"):
        self.audit = audit

    def __enter__(self) -> None:
        self.audit.on = True
        self.enabled = _gc_isenabled()
        _gc_disable()
        self.callbacks = _GC_CALLBACKS[:]
        _GC_CALLBACKS.clear()

    def __exit__(self, *exc) -> None:
        on, added = _gc_isenabled(), bool(_GC_CALLBACKS)
        _gc_disable()
        self.audit.noted.update(n for n, hit in (("gc.enable (during a checked or timed call)", on),
                                                 ("gc.callbacks (added during a checked or timed call)", added)) if hit)
        _GC_CALLBACKS[:] = self.callbacks
        if self.enabled:
            _gc_enable()
        self.audit.on = False


class ProfileAudit:
    """An audit hook, added before the candidate is imported (nothing removes one): while `on` (a timed command,
    quiet_loop) it adds to `noted` every profile or trace function set or removed. A profile function that a
    call sets, which does its work at the return of the clock's own read and then removes itself, is gone
    before the harness's next step could find it; setting it is seen here."""

    __slots__ = ("on", "noted")

    def __init__(self, noted: set[str]):
        self.on, self.noted = False, noted
        sys.addaudithook(self)

    def __call__(self, event: str, args: tuple) -> None:
        if self.on and event in _PROFILE_EVENTS:
            self.noted.add(f"{event} (during a checked or timed call)")


def preload_compile() -> None:
    """What torch.compile does at its first use, done before the watch's snapshot and the thread count, so an
    honest compiled candidate changes nothing they compare: dynamo rewraps nn.Module.__init__ and __setstate__,
    and inductor starts a thread for its compiles (TORCHINDUCTOR_COMPILE_THREADS=1: no pool of processes)."""
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    importlib.import_module("torch._dynamo.mutation_guard").install_generation_tagging_init()
    importlib.import_module("torch._inductor.async_compile").AsyncCompile.pool().submit(int).result()


def settle_gc() -> None:
    """Freeze what is alive now, so each setup's collection scans only what came after: with torch and dynamo
    imported a full collection took 0.17 s on the CPU machine, after this 10 us."""
    _gc_collect()
    _gc_freeze()


def native_threads() -> int:
    try:
        return len(_listdir("/proc/self/task"))
    except OSError:
        return -1


def _attrs(obj: Any) -> dict:
    return obj if isinstance(obj, dict) else vars(obj)


_MISSING = object()
_PINNED = frozenset({"conn", "watch", "fp", "clock", "slots", "noted", "guard", "quiet"})


def _shadowed(instances: dict[str, tuple[Any, dict]]) -> list[str]:
    """Attributes of the harness's own objects (the worker, its connection to the judge) set on the instance
    over a method of its class, or pinned ones (its connection, watch, clock, hooks-off guard...) rebound since
    the snapshot: the instance routes to the reply path and the guards that no module or class attribute shows."""
    out = []
    for name, (obj, before) in instances.items():
        for k, v in vars(obj).items():
            if (k in _PINNED or callable(getattr(type(obj), k, None))) and before.get(k, _MISSING) is not v:
                out.append(f"{name}.{k} (instance attribute)")
    return out


class RuntimeWatch:
    """Identity of every callable the harness relies on, to report what a candidate replaced. With `strict`, the
    code object of each Python function among them too (replacing a function's `__code__` keeps its identity),
    the Python handler of every signal (a handler runs between any two of the harness's steps, once the clock
    has stopped, whichever thread the signal reached) and the harness's own objects (`hold`)."""

    def __init__(self, noted: set[str], strict: bool = False, namespaces: dict[str, dict] | None = None):
        self.strict = strict
        self.namespaces = dict(namespaces or {})
        self.instances: dict[str, tuple[Any, dict]] = {}
        kinds = (types.ModuleType, staticmethod, classmethod)
        self.snapshot = {name: {k: v for k, v in _attrs(obj).items() if callable(v) or isinstance(v, kinds)}
                         for name, obj in self._targets().items()}
        self.codes = [(f"{name}.{k}.__code__", v, v.__code__) for name, attrs in self.snapshot.items()
                      for k, v in attrs.items() if isinstance(v, types.FunctionType)] if strict else []
        self.handlers = {s: _getsignal(s) for s in _SIGNALS} if strict else {}
        self.modules = [n for n in sys.modules if n == "harness" or n.startswith("harness.")]
        self.noted = noted  # seen by other means (hooks_off, quiet_loop, ProfileAudit), reported with the rest

    def _targets(self) -> dict[str, Any]:
        """What the worker's own steps call; with `strict` the standard library's modules
        among them too (the replies pass through json, the draw through random, inspect and contextlib), and
        the problem's namespace, whose get_inputs and helpers every draw runs."""
        targets: dict[str, Any] = {
            "time": time, "builtins": builtins, "os": os, "gc": gc, "threading": threading,
            "torch": torch, "torch.Tensor": torch.Tensor, "torch.TensorBase": torch.Tensor.__mro__[1],
            "torch.testing": torch.testing, "torch.nn.Module": torch.nn.Module,
            "torch.utils.cpp_extension": sys.modules.get("torch.utils.cpp_extension"),
        }
        if self.strict:
            targets.update({"json": json, "random": random, "random.Random": random.Random, "inspect": inspect,
                            "contextlib": contextlib, "functools": functools, **self.namespaces})
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

    def hold(self, **instances: Any) -> None:
        """With `strict`, the harness's own objects as they are now (see _shadowed)."""
        if self.strict:
            self.instances.update({name: (obj, dict(vars(obj))) for name, obj in instances.items()
                                   if hasattr(obj, "__dict__")})

    def changed(self) -> list[str]:
        out = []
        for name, obj in self._targets().items():
            now = _attrs(obj)
            out.extend(f"{name}.{k}" for k, v in self.snapshot.get(name, {}).items() if now.get(k) is not v)
        out.extend(f"sys.modules[{name}]" for name in self.modules if sys.modules.get(name) is None)
        out.extend(_shadowed(self.instances))
        out.extend(label for label, fn, code in self.codes if fn.__code__ is not code)
        out.extend(f"signal.signal({signal.strsignal(s) or s}, ...) (its handler runs between any two steps)"
                   for s, h in self.handlers.items() if _getsignal(s) is not h)
        return sorted(out + sorted(self.noted))[:20]

"""Clocks inside a worker: flush, clock, warm up by time, repeat until the error is small. Primitives are
bound at import: a candidate patching `time` or `torch.cuda.Event` later changes nothing here."""

import bisect
import contextlib
import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..settings import L2_RESET_ON_DEMAND, LoopSettings
from ..stats import quantile_rse

_insort = bisect.insort
_perf_ns = time.perf_counter_ns
_monotonic = time.monotonic
_zero = torch.Tensor.zero_
_fill = torch.Tensor.fill_
_spin = getattr(torch.cuda, "_sleep", None)

CUDA_LIMIT_PERSISTING_L2 = 0x06
CUDA_DEVICE_SCHEDULE_SPIN = 0x01
CUDA_DEVICE_MAP_HOST = 0x08
SPIN_PROBE_CYCLES = 100_000


@dataclass
class Sample:
    device_us: float
    host_us: float
    span_us: float
    launch_us: float = 0.0  # the host's time to issue the call (returning from it)
    call: int = -1


def mapped_libraries(name: str) -> list[str]:
    """Paths of the shared libraries loaded in this process whose path contains `name`."""
    try:
        with open("/proc/self/maps") as f:
            return sorted({line.split()[-1] for line in f if name in line})
    except OSError:
        return []


def find_cudart() -> ctypes.CDLL | None:
    for p in mapped_libraries("libcudart"):
        with contextlib.suppress(OSError):
            return ctypes.CDLL(p)
    return None


def prefer_spin_wait() -> str:
    """Spin-waiting host syncs, asked by every worker before its CUDA context exists: pinned to one core, the
    driver's default wait cost a pack-tokens call with a host sync inside 23-27 us more on the H200."""
    cudart = find_cudart()
    if cudart is None:
        return "unavailable"
    rc = cudart.cudaSetDeviceFlags(CUDA_DEVICE_SCHEDULE_SPIN | CUDA_DEVICE_MAP_HOST)
    if rc != 0:
        cudart.cudaGetLastError()
        return f"error {rc}"
    return "spin"


class CudaClock:
    """CUDA events on the current stream around the call. behind_flush: as users time one (triton's do_bench,
    KernelBench), from an idle device the flush is queued and the call launched behind it with no host sync
    between, so launches queue while the flush runs; otherwise the device is synchronized after the flush and
    a call's launch gaps all count. cover_us: the device is held that long at least before the start event (the
    flush, then a spin kernel), so launches that take the host up to that long are all queued when the events
    start. The host clock and a span event start before the flush: the host's wait past the last event is the
    span's complement."""

    def __init__(self, flush_bytes: int, on_demand: bool = L2_RESET_ON_DEMAND):
        self.flush_buf = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        self._record = torch.cuda.Event.record
        self._elapsed = torch.cuda.Event.elapsed_time
        self._sync = torch.cuda.synchronize
        self._cudart = find_cudart()
        self.on_demand = on_demand
        self.l2_reset = "unavailable"
        if self._cudart is not None:
            self._set_aside_none()
        self.flush_us: float | None = None  # the flush's and the spin's device speed, measured once a hold needs them
        self.spin_cycles_per_us = 0.0

    def _calibrate(self) -> None:
        self.flush_us = self._device_us(self.flush)
        if _spin is not None:
            us = self._device_us(lambda: _spin(SPIN_PROBE_CYCLES))
            self.spin_cycles_per_us = SPIN_PROBE_CYCLES / us if us > 0 else 0.0

    def _device_us(self, work: Callable[[], Any]) -> float:
        """Device time of `work` from an idle device: the median of five."""
        e0, e1 = self._events[:2]
        times = []
        for _ in range(5):
            self._sync()
            self._record(e0)
            work()
            self._record(e1)
            self._sync()
            times.append(self._elapsed(e0, e1) * 1e3)
        return sorted(times)[2]

    def reset_l2(self) -> None:
        """No L2 set aside for persisting lines, so none a call marked survives the flush. on_demand
        (settings.L2_RESET_ON_DEMAND): the limit is read first (a host call), and set to 0 and the lines reset
        only where it is not 0. A fresh H100 context sets 9.4 MB aside; with a reset at every flush a
        launch-bound figure read ~5% slower for the rest of the process (bench/l2step.py)."""
        if self._cudart is None:
            return
        if not self.on_demand:
            self._cudart.cudaCtxResetPersistingL2Cache()
            return
        size = ctypes.c_size_t(0)
        if self._cudart.cudaDeviceGetLimit(ctypes.byref(size), CUDA_LIMIT_PERSISTING_L2) == 0 and size.value == 0:
            return
        self._set_aside_none()

    def _set_aside_none(self) -> None:
        rc1 = self._cudart.cudaDeviceSetLimit(CUDA_LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
        rc2 = self._cudart.cudaCtxResetPersistingL2Cache()
        self.l2_reset = "ok" if rc1 == 0 and rc2 == 0 else f"error {rc1}/{rc2}"

    def flush(self) -> None:
        self.reset_l2()
        _zero(self.flush_buf)

    def hold(self, cover_us: float) -> None:
        """The flush, then the device kept busy until cover_us in all (a spin, or more flushes without one)."""
        self.flush()
        pad = cover_us - (self.flush_us or cover_us)
        if pad <= 1.0:
            return
        if self.spin_cycles_per_us > 0:
            _spin(int(pad * self.spin_cycles_per_us))
        else:
            for _ in range(int(-(-pad // max(self.flush_us, 1.0)))):
                _zero(self.flush_buf)

    def measure(self, call: Callable[[], Any], after: Callable[[Any], Any], behind_flush: bool,
                cover_us: float = 0.0):
        ef, e0, e1, e2 = self._events
        if behind_flush and cover_us > 0 and self.flush_us is None:
            self._calibrate()
        if not behind_flush:
            self.flush()
        self._sync()
        h0 = _perf_ns()
        self._record(ef)
        if behind_flush:
            self.hold(cover_us)
        self._record(e0)
        l0 = _perf_ns()
        out = call()
        l1 = _perf_ns()
        self._record(e1)
        extra = after(out)
        self._record(e2)
        self._sync()
        h1 = _perf_ns()
        return out, extra, Sample(self._elapsed(e0, e1) * 1e3, (h1 - h0) / 1e3, self._elapsed(ef, e2) * 1e3,
                                  (l1 - l0) / 1e3)


def guard_flush(clock, guard: Callable[[], Any]) -> None:
    """The clock's flush (and hold) inside `guard()` from now on: no hook of the candidate's acts on the
    flush's torch calls, just before the clock starts."""
    for name in ("flush", "hold"):
        if hasattr(clock, name):
            setattr(clock, name, _guarded(getattr(clock, name), guard))


class CpuClock:
    """Monotonic host clock around the call; the flush writes a buffer twice the last-level cache."""

    def __init__(self, flush_bytes: int):
        self.flush_buf = torch.empty(flush_bytes, dtype=torch.uint8)
        self.l2_reset = "n/a"
        self._n = 0

    def flush(self) -> None:
        self._n = (self._n + 1) % 251
        _fill(self.flush_buf, self._n)

    def measure(self, call: Callable[[], Any], after: Callable[[Any], Any], behind_flush: bool,
                cover_us: float = 0.0):
        self.flush()
        h0 = _perf_ns()
        out = call()
        h1 = _perf_ns()
        extra = after(out)
        h2 = _perf_ns()
        us = (h1 - h0) / 1e3
        return out, extra, Sample(us, us, (h2 - h0) / 1e3, us)


def run_loop(clock, step: Callable[[int], tuple[Callable[[], Any], bool]], after: Callable[[Any], Any],
             on_call: Callable[[int, Any, Any], None], s: LoopSettings,
             guard: Callable[[], Any] = contextlib.nullcontext) -> tuple[list[Sample], int]:
    """Warm up, then sample until the error of the figure read (the samples' `quantile`, not the mean: its
    rule stops too early for a low quantile) is under target, or the budget or max_runs is spent. At least two
    samples are taken whatever the budget: on a busy host one input draw can outlast a short round's budget,
    and one sample has no spread. Everything but the call itself runs inside `guard()` (watch.hooks_off)."""
    step, after, on_call = _guarded(step, guard), _guarded(after, guard), _guarded(on_call, guard)
    start = _monotonic()
    measure_start = None
    samples: list[Sample] = []
    seen: list[float] = []
    i = 0
    while True:
        call, counted = step(i)
        out, extra, sample = clock.measure(call, after, s.behind_flush, s.cover_us)
        on_call(i, out, extra)
        del out
        now = _monotonic()
        if measure_start is None:
            if (now - start) * 1e3 >= s.warmup_ms and i >= 1:
                measure_start = now
        elif counted:
            sample.call = i
            samples.append(sample)
            _insort(seen, sample.device_us)
            n, elapsed = len(samples), now - measure_start
            if n >= s.max_runs or (n >= 3 and elapsed >= 4 * s.budget_s):
                break
            if n >= s.min_runs and (elapsed >= s.budget_s or quantile_rse(seen, s.quantile) <= s.target_rse):
                break
        if measure_start is not None and len(samples) >= 2 and now - measure_start >= 8 * s.budget_s:
            break
        i += 1
    return samples, i + 1 - len(samples)


def _guarded(fn: Callable, guard: Callable[[], Any]) -> Callable:
    """fn, called inside guard(); fn itself where there is no guard (nullcontext), adding nothing to a loop."""
    if guard is contextlib.nullcontext:
        return fn

    def inside(*args):
        with guard():
            return fn(*args)

    return inside

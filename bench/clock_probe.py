"""What moves a small shape's time between runs: the GPU's clock or the host core. Times the fast kernel,
the eager reference and an empty launch at one shape (flush, sync, events, as the harness's clock), in
blocks, after an idle pause or after keeping the GPU busy, on several host cores; prints each block's
median beside the SM clock read through NVML just before and after it.

    python bench/clock_probe.py [--shape seed] [--cores 15 7 0] [--calls 100]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import problem  # noqa: E402
from harness.build_worker import import_on_this_gpu  # noqa: E402
from harness.config import load_config  # noqa: E402


def sm_clock() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return str(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception as e:  # noqa: BLE001 - a diagnostic: the table still prints without clocks
        return f"n/a ({type(e).__name__})"


def block(fn, calls: int, flush: torch.Tensor) -> float:
    ts = []
    for _ in range(calls):
        flush.zero_()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        out = fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3)
        del out
    return statistics.median(ts)


def heat(flush: torch.Tensor, seconds: float) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        for _ in range(20):
            flush.zero_()
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--shape", default="seed")
    ap.add_argument("--cores", nargs="+", type=int, default=[15, 7, 0])
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--cache", default=str(REPO / ".cache" / "kbh"))
    args = ap.parse_args()
    cfg = load_config(str(REPO / "configs" / "pack_tokens.yaml"))
    ns = problem.load_namespace(problem.read_problem(Path(cfg.problem)))
    shape = next(s for s in cfg.shapes if s.name == args.shape)
    inputs = problem.make_inputs(ns, dict(shape.params), 1234, "cuda")
    cand = import_on_this_gpu(args.solution, args.cache).ModelNew()
    ref = ns["Model"]()
    empty = torch.empty(0, device="cuda")
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    fns = {"candidate": lambda: cand(*inputs), "reference": lambda: ref(*inputs), "empty launch": lambda: empty.add_(1)}
    for f in fns.values():
        f()
    print(f"{torch.cuda.get_device_name(0)}; shape {args.shape}; median us of {args.calls} calls per block; "
          f"allowed cores {sorted(os.sched_getaffinity(0))}\n")
    print("| core | before | clock before MHz | " + " | ".join(fns) + " | clock after MHz |")
    print("|---|---|---:|" + "---:|" * len(fns) + "---:|")
    for core in args.cores:
        try:
            os.sched_setaffinity(0, {core})
        except OSError as e:
            print(f"core {core}: {e}")
            continue
        for before in ("idle 2 s", "busy 0.3 s", "none"):
            if before.startswith("idle"):
                time.sleep(2.0)
            elif before.startswith("busy"):
                heat(flush, 0.3)
            c0 = sm_clock()
            meds = [block(f, args.calls, flush) for f in fns.values()]
            print(f"| {core} | {before} | {c0} | " + " | ".join(f"{m:.1f}" for m in meds) + f" | {sm_clock()} |",
                  flush=True)


if __name__ == "__main__":
    main()

"""Where does a candidate call's time go? Times one solution's call on the GPU under the harness's
procedure and under variants that drop one step at a time, in one process, so the difference between
two rows is the cost of that step.

    python bench/overhead.py [--solution solutions/pack_tokens/fast_vec16.py] [--shape seed]

Rows: events around the call back to back (no sync), with a sync before each call, with the 256 MB L2
flush, with the persisting-L2 reset, on one pinned core or two, and the host wall clock per call.
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

from harness import extcache, timing  # noqa: E402
from harness.build import toolchain_id  # noqa: E402
from harness.build_worker import import_candidate  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.problem import load_namespace, make_inputs, read_problem  # noqa: E402


def events(call, n: int, before=None) -> float:
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    xs = []
    for _ in range(n):
        if before:
            before()
        e0.record()
        call()
        e1.record()
        e1.synchronize()
        xs.append(e0.elapsed_time(e1) * 1e3)
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--shape", default="seed")
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    cfg = load_config(REPO / "configs" / "pack_tokens.yaml")
    params = next(s for s in cfg.shapes if s.name == args.shape).params
    major, minor = torch.cuda.get_device_capability()
    os.environ["TORCH_CUDA_ARCH_LIST"] = f"{major}.{minor}"
    os.environ["KBH_TOOLCHAIN"] = toolchain_id("cuda")
    extcache.install(REPO / ".cache" / "kbh")
    model = import_candidate(args.solution).ModelNew()
    ns = load_namespace(read_problem(cfg.problem))
    ref = ns["Model"]()
    inputs = make_inputs(ns, dict(params), 1, "cuda")
    clock = timing.CudaClock("cuda", 256 * 2**20)
    empty_x = torch.zeros(1, device="cuda")
    rows = []
    for label, fn in (("candidate", lambda: model(*inputs)), ("reference", lambda: ref(*inputs)),
                      ("one-element add_", lambda: empty_x.add_(1)), ("read one value (.item())", lambda: empty_x.item())):
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        row = [label, events(fn, args.n), events(fn, args.n, torch.cuda.synchronize),
               events(fn, args.n, lambda: (clock.flush_buf.zero_(), torch.cuda.synchronize())),
               events(fn, args.n, lambda: (clock.flush(), torch.cuda.synchronize()))]
        cores = sorted(os.sched_getaffinity(0))
        for pin in ([cores[-1]], cores[-2:]):
            os.sched_setaffinity(0, pin)
            row.append(events(fn, args.n, lambda: (clock.flush(), torch.cuda.synchronize())))
        os.sched_setaffinity(0, cores)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.n):
            fn()
        torch.cuda.synchronize()
        row.append((time.perf_counter() - t0) / args.n * 1e6)
        rows.append(row)
    head = ["call", "back to back", "sync before", "+ L2 flush", "+ persisting-L2 reset (harness)",
            "harness, 1 pinned core", "harness, 2 pinned cores", "wall per call, back to back"]
    print(f"{torch.cuda.get_device_name()}, shape {args.shape}: median us over {args.n} calls (CUDA events)\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + r[0] + " | " + " | ".join(f"{x:.1f}" for x in r[1:]) + " |")


if __name__ == "__main__":
    main()

"""Where a timed call's wall time goes inside a worker: drawing its inputs, fingerprinting and poisoning
after its batch, the clock's flush and syncs, the call. A timing loop that stops on its budget takes as
many calls as these allow, so their sum per call decides how many samples a round gets.

    python bench/feed_cost.py [--solution solutions/pack_tokens/fast_vec16.py] [--shapes seed wide] [--n 300]

Runs the harness's own worker in-process (candidate and reference roles), wraps its steps with host
timers (no extra syncs, so asynchronous work shows up in the next sync: the clock's), and prints
milliseconds per call, and the fixed cost of one timing command (a 10-call command's wall time less
10 calls at the long run's rate).
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import statistics
import sys
import time
from collections import defaultdict
from multiprocessing.connection import Connection
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--shapes", nargs="+", default=["seed", "wide"])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    from harness import timing
    from harness import worker as wm
    from harness.config import load_config
    from harness.problem import read_problem

    cfg = load_config(REPO / "configs" / "pack_tokens.yaml")
    src = dataclasses.asdict(read_problem(cfg.problem))
    spent: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)

    def wrap(owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                spent[label] += time.perf_counter() - t0
                counts[label] += 1

        setattr(owner, name, timed)

    wrap(wm.Worker, "inputs", "draw inputs")
    wrap(wm.TimedFeed, "settle", "settle (fingerprints, poison)")
    wrap(wm.TimedFeed, "hold", "hold")
    wrap(wm.Fingerprinter, "exact_many", "  of which exact fingerprints")
    wrap(wm, "poison", "  of which poison")
    wrap(timing.CudaClock, "flush", "  flush (reset + zero)")
    wrap(timing.CudaClock, "measure", "measure (flush, sync, call, sync)")
    wrap(timing.CudaClock, "sync", "sync")

    workers = {}
    for role in ("candidate", "reference"):
        w = wm.Worker(Connection(socket.socketpair()[0].detach()))
        w.cmd_init([], role=role, device=args.device, problem_src=src, fp_seed=1,
                   cache_dir=str(REPO / ".cache" / "kbh"))
        if role == "candidate":
            w.cmd_load([], path=args.solution)
        workers[role] = w
    loop = {"warmup_ms": 0.0, "min_runs": args.n, "max_runs": args.n, "budget_s": 600.0, "target_rse": 0.0}
    cases = [("candidate", True, None), ("reference", False, None), ("reference", True, "copy"),
             ("reference", True, "launch")]
    print(f"ms per call (wall, host timers), {args.n} calls per row, device {args.device}\n")
    labels = ["total", "draw inputs", "settle (fingerprints, poison)", "  of which exact fingerprints",
              "  of which poison", "hold", "measure (flush, sync, call, sync)", "  flush (reset + zero)", "sync"]
    print("| shape | who | calls | median call us | fixed ms per command | " + " | ".join(labels) + " |")
    print("|" + "---|" * (5 + len(labels)))
    for shape_name in args.shapes:
        shape = next(s for s in cfg.shapes if s.name == shape_name)
        for role, verify, floor in cases:
            w = workers[role]
            w.cmd_setup([], params=dict(shape.params), init_seed=1)
            extra = {"floor": floor, "floor_bytes": 1 << 20} if floor else {}
            w.cmd_time([], base_seed=3, loop=dict(loop, min_runs=20, max_runs=20), verify=verify, **extra)
            spent.clear()
            counts.clear()
            t0 = time.perf_counter()
            r = w.cmd_time([], base_seed=7, loop=loop, verify=verify, **extra)
            wall = time.perf_counter() - t0
            calls = len(r["device_us"]) + r["unsampled"]
            row = {"total": wall, **spent}
            t0 = time.perf_counter()
            small = w.cmd_time([], base_seed=9, loop=dict(loop, min_runs=10, max_runs=10), verify=verify, **extra)
            per_call = wall / calls
            fixed = time.perf_counter() - t0 - per_call * (len(small["device_us"]) + small["unsampled"])
            who = f"{role}{' ' + floor if floor else ''}{' verified' if verify else ''}"
            med = statistics.median(r["device_us"])
            print(f"| {shape_name} | {who} | {calls} | {med:.1f} | {1e3 * fixed:.1f} | "
                  + " | ".join(f"{1e3 * row.get(k, 0.0) / calls:.3f}" for k in labels) + " |", flush=True)


if __name__ == "__main__":
    main()

"""Where does a candidate call's time go? Times one solution's call on the GPU under the harness's
clock and under variants that drop one step at a time, each set in a fresh process started the way a
worker starts (pinned to cores before its CUDA context exists, or not), so the difference between two
cells is the cost of one step or one process setting.

    python bench/overhead.py [--solution solutions/pack_tokens/fast_vec16.py] [--shapes seed wide]

Columns: events back to back (no sync, no flush), a sync before each call, the L2 flush, the harness's
clock (flush, persisting-L2 reset, sync), and its host time (call plus a full sync). Processes: not
pinned; pinned to one core; one core with spin-wait forced; one core with blocking sync forced.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SCHED = {"auto": 0, "spin": 1, "yield": 2, "blocking": 4}
MODES = {"not pinned": (None, None), "1 core": (1, None), "1 core, spin": (1, "spin"),
         "1 core, blocking": (1, "blocking"), "2 cores": (2, None)}


def child(args) -> None:
    cores = sorted(os.sched_getaffinity(0))
    if args.pin:
        os.sched_setaffinity(0, cores[-args.pin:])
    import torch

    from harness import timing
    from harness.build_worker import import_on_this_gpu
    from harness.config import load_config
    from harness.problem import load_namespace, make_inputs, read_problem

    torch.set_grad_enabled(False)
    if args.pin:
        torch.set_num_threads(args.pin)
    cudart = timing._find_cudart()
    if args.sched and cudart is not None:
        cudart.cudaSetDeviceFlags(SCHED[args.sched])
    torch.cuda.set_device(0)
    flags = ctypes.c_uint(0)
    if cudart is not None:
        cudart.cudaGetDeviceFlags(ctypes.byref(flags))
    model = import_on_this_gpu(args.solution, REPO / ".cache" / "kbh").ModelNew()
    if args.build_only:
        return
    cfg = load_config(REPO / "configs" / "pack_tokens.yaml")
    ns = load_namespace(read_problem(cfg.problem))
    ref = ns["Model"]()
    clock = timing.CudaClock("cuda", 256 * 2**20)
    one = torch.zeros(1, device="cuda")
    sync = torch.cuda.synchronize

    def events(call, before=None) -> float:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        xs = []
        for _ in range(args.n):
            if before:
                before()
            e0.record()
            call()
            e1.record()
            e1.synchronize()
            xs.append(e0.elapsed_time(e1) * 1e3)
        return statistics.median(xs)

    def harness_clock(call) -> tuple[float, float]:
        samples = [clock.measure(call, lambda o: None)[2] for _ in range(args.n)]
        return statistics.median(s.device_us for s in samples), statistics.median(s.host_us for s in samples)

    rows = []
    for shape in args.shapes:
        params = next(s for s in cfg.shapes if s.name == shape).params
        inputs = make_inputs(ns, dict(params), 1, "cuda")
        calls = [(f"{shape}: candidate", lambda x=inputs: model(*x)), (f"{shape}: reference", lambda x=inputs: ref(*x))]
        if shape == args.shapes[0]:
            calls += [("one-element add_", lambda: one.add_(1)), ("read one value (.item())", lambda: one.item())]
        for label, fn in calls:
            for _ in range(20):
                fn()
            sync()
            dev, host = harness_clock(fn)
            rows.append([label, events(fn), events(fn, sync), events(fn, lambda: (clock.flush_buf.zero_(), sync())),
                         dev, host])
    if args.worker:
        rows += worker_rows(args, cfg)
    print(json.dumps({"flags": flags.value, "affinity": sorted(os.sched_getaffinity(0)), "rows": rows}))


def worker_rows(args, cfg) -> list:
    """The harness's own worker, called in-process, with extra host or device work inserted before each
    call (after the input set is taken): how much does work between timed calls cost the next call?"""
    import dataclasses
    import socket
    import time
    from multiprocessing.connection import Connection

    import numpy as np
    import torch

    from harness import worker as worker_mod
    from harness.problem import read_problem
    from harness.worker import Worker

    src = dataclasses.asdict(read_problem(cfg.problem))
    loop = {"warmup_ms": 25.0, "min_runs": args.n, "max_runs": args.n, "budget_s": 30.0, "target_rse": 0.0}
    junk = np.ones(64 * 2**20 // 8)
    workers = {}
    for role in ("candidate", "reference"):
        w = Worker(Connection(socket.socketpair()[0].detach()))
        w.cmd_init([], role=role, device="cuda", problem_src=src, fp_seed=1, cache_dir=str(REPO / ".cache" / "kbh"))
        if role == "candidate":
            w.cmd_load([], path=args.solution)
        workers[role] = w
    real_take = worker_mod.TimedFeed.take
    one = torch.zeros(1, device="cuda")
    big = torch.empty(2**30, dtype=torch.uint8, device="cuda")

    def spin(us: float) -> None:
        torch.cuda._sleep(int(us * 1980))

    def taps(n: int) -> None:
        for _ in range(n):
            one.add_(1)

    variants = {
        "harness loop": None,
        "+ 2 ms host sleep": lambda: time.sleep(0.002),
        "+ 64 MB host memset": lambda: junk.fill(1),
        "+ 2 ms sleep, 500 us spin": lambda: (time.sleep(0.002), spin(500)),
        "+ 2 ms sleep, 1 GB zero": lambda: (time.sleep(0.002), big.zero_()),
        "+ 50 launches": lambda: taps(50),
    }
    rows = []
    for shape in args.shapes:
        params = dict(next(s for s in cfg.shapes if s.name == shape).params)
        for role, w in workers.items():
            w.cmd_setup([], params=params, init_seed=1)
            for name, fn in variants.items():
                def take(self, i, fn=fn):
                    got = real_take(self, i)
                    if fn is not None:
                        fn()
                    return got

                worker_mod.TimedFeed.take = take
                for verify in (True, False):
                    if verify and role == "reference":
                        continue
                    r = w.cmd_time([], base_seed=7, loop=loop, verify=verify)
                    dev = statistics.median(r["device_us"])
                    host = statistics.median(r["host_us"])
                    rows.append([f"{shape}: worker {role}, {name}{', verified' if verify else ''}",
                                 float("nan"), float("nan"), float("nan"), dev, host])
            worker_mod.TimedFeed.take = real_take
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--shapes", nargs="+", default=["seed"])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    ap.add_argument("--worker", action="store_true", help="also time through the harness's worker, in-process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pin", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--sched", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    me = [sys.executable, __file__, "--solution", args.solution, "--n", str(args.n), "--shapes", *args.shapes, "--child"]
    me += ["--worker"] if args.worker else []
    subprocess.run(me + ["--build-only"], check=True)
    head = ["process", "call", "back to back", "sync before", "+ L2 flush", "harness clock", "harness host time"]
    print(f"shapes {' '.join(args.shapes)}: median us over {args.n} calls (CUDA events unless host)\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for mode in args.modes:
        pin, sched = MODES[mode]
        extra = (["--pin", str(pin)] if pin else []) + (["--sched", sched] if sched else [])
        p = subprocess.run(me + extra, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"| {mode} | failed: {p.stderr.strip().splitlines()[-1:]} |")
            continue
        res = json.loads(p.stdout.strip().splitlines()[-1])
        for r in res["rows"]:
            print(f"| {mode} (flags {res['flags']}) | " + r[0] + " | " + " | ".join(f"{x:.1f}" for x in r[1:]) + " |",
                  flush=True)


if __name__ == "__main__":
    main()

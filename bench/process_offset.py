"""Does a fresh process time differently from the last one, in the same host phase? Starts several processes
per arm (all pinned to the lane's core, spin-wait asked, as workers are), each loading the eager reference, a
candidate and an empty launch at one shape, then asks them in turn, in shuffled order, pass after pass, to
time each (the harness's clock: flush, persisting-L2 reset, sync, events around the call).

    python bench/process_offset.py [--procs 4] [--passes 12] [--calls 60] [--shape seed] [--arms ...]

A pass's figures share the host's phase, so each figure is divided by the median over every process of the
same pass; what is left is each process's own offset plus noise. Per arm and figure the table prints the
spread between processes (CV of their medians over passes) beside what the noise alone would leave (the
spread within a process over passes, times 1.25 / sqrt(passes)): a spread well over that is a per-process
offset, which the speedup of separate evaluations inherits and more rounds in one process cannot average out.

Arms: Python's random hash seed per process (what workers got until the twentieth session, reported as "as
workers" in its first two calls); PYTHONHASHSEED fixed (what workers get now: string hashes, and so dict
layouts, the same in every process); the same with address-space randomization off (personality
ADDR_NO_RANDOMIZE, where the host allows it).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

ADDR_NO_RANDOMIZE = 0x0040000
ARMS = {"random hash seed": ({}, False), "PYTHONHASHSEED=0": ({"PYTHONHASHSEED": "0"}, False),
        "hash seed 0, no ASLR": ({"PYTHONHASHSEED": "0"}, True)}
FIGURES = ("reference", "candidate", "launch", "speedup")


def no_aslr() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    cur = libc.personality(0xFFFFFFFF)
    libc.personality(cur | ADDR_NO_RANDOMIZE)


def child(args) -> None:
    import torch

    os.sched_setaffinity(0, {args.core})
    from harness import extcache, problem
    from harness.build_worker import import_candidate, import_on_this_gpu
    from harness.config import load_config
    from harness.timing import CpuClock, CudaClock, prefer_spin_wait
    from harness.worker import _EmptyModel

    cuda = args.device == "cuda"
    spin = prefer_spin_wait() if cuda else "n/a"
    cfg = load_config(str(REPO / "configs" / "pack_tokens.yaml"))
    ns = problem.load_namespace(problem.read_problem(Path(cfg.problem)))
    shape = next(s for s in cfg.shapes if s.name == args.shape)
    inputs = problem.make_inputs(ns, dict(shape.params), 1234, args.device)
    if cuda:
        cand = import_on_this_gpu(args.solution, args.cache).ModelNew()
    else:
        extcache.install(args.cache)
        cand = import_candidate(args.solution).ModelNew()
    ref = ns["Model"]()
    empty, one = _EmptyModel(), torch.zeros(1, device=args.device)
    flush = 2 * torch.cuda.get_device_properties(0).L2_cache_size if cuda else 64 * 2**20
    clock = CudaClock("cuda", flush) if cuda else CpuClock(flush)
    fns = {"reference": lambda: ref(*inputs), "candidate": lambda: cand(*inputs), "launch": lambda: empty(one)}
    for f in fns.values():
        for _ in range(5):
            f()
    clock.sync()
    persona = Path("/proc/self/personality").read_text().strip()
    print(json.dumps({"ready": os.getpid(), "spin": spin, "personality": persona,
                      "hashseed": os.environ.get("PYTHONHASHSEED")}), flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        out = {}
        for name, f in fns.items():
            ts = sorted(clock.measure(f, lambda o: None)[2].device_us for _ in range(args.calls))
            out[name] = ts[len(ts) // 10]
        print(json.dumps(out), flush=True)


def cv(xs: list[float]) -> float:
    return statistics.stdev(xs) / statistics.mean(xs) if len(xs) > 1 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--shape", default="seed")
    ap.add_argument("--procs", type=int, default=4, help="processes per arm")
    ap.add_argument("--passes", type=int, default=12)
    ap.add_argument("--calls", type=int, default=60, help="calls per figure per pass; the 10th percentile is kept")
    ap.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)))
    ap.add_argument("--cache", default=str(REPO / ".cache" / "kbh"))
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of the script with a C++ candidate")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    cmd = [sys.executable, __file__, "--child", "--device", args.device, "--solution", args.solution, "--shape", args.shape,
           "--calls", str(args.calls), "--core", str(args.core), "--cache", args.cache]
    procs = []  # (arm, Popen, ready info)

    def start(arm: str):
        env, aslr_off = ARMS[arm]
        base = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
        return subprocess.Popen(cmd, env=dict(base, PYTHONPATH=str(REPO), **env), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, cwd=REPO, preexec_fn=no_aslr if aslr_off else None)

    order = [arm for _ in range(args.procs) for arm in args.arms]
    first = start(order[0])  # alone: it builds the candidate if the cache lacks it
    procs.append((order[0], first, json.loads(first.stdout.readline())))
    started = [(arm, start(arm)) for arm in order[1:]]
    procs += [(arm, p, json.loads(p.stdout.readline())) for arm, p in started]
    for arm, _, info in procs:
        print(f"{arm}: pid {info['ready']}, personality {info['personality']}, PYTHONHASHSEED {info['hashseed']}, "
              f"sync {info['spin']}")
    rng = random.Random(0)
    raw = [[] for _ in procs]  # per process, per pass: figures
    for _ in range(args.passes):
        idx = list(range(len(procs)))
        rng.shuffle(idx)
        for i in idx:
            p = procs[i][1]
            p.stdin.write("go\n")
            p.stdin.flush()
            r = json.loads(p.stdout.readline())
            r["speedup"] = r["reference"] / r["candidate"]
            raw[i].append(r)
    for _, p, _ in procs:
        p.stdin.close()
        p.wait(timeout=60)
    print(f"\n{len(procs)} processes on core {args.core}, {args.passes} passes, shape {args.shape}; each figure the "
          f"10th percentile of {args.calls} calls (us; speedup: reference over candidate), divided by its pass's "
          "median over every process\n")
    print("| arm | figure | median (us or x) | spread between processes (CV of their medians) | noise alone would "
          "leave | process medians, relative |")
    print("|---|---|---:|---:|---:|---|")
    for arm in args.arms:
        mine = [i for i, (a, _, _) in enumerate(procs) if a == arm]
        for fig in FIGURES:
            norm = {}
            for k in range(args.passes):
                mid = statistics.median(raw[i][k][fig] for i in range(len(procs)))
                for i in mine:
                    norm.setdefault(i, []).append(raw[i][k][fig] / mid)
            meds = [statistics.median(v) for v in norm.values()]
            within = statistics.mean(cv(v) for v in norm.values())
            level = statistics.median(raw[i][k][fig] for i in mine for k in range(args.passes))
            print(f"| {arm} | {fig} | {level:.3f} | {100 * cv(meds):.2f}% | {100 * within * 1.25 / args.passes ** 0.5:.2f}% "
                  f"| {' '.join(f'{m - 1:+.3f}' for m in meds)} |", flush=True)


if __name__ == "__main__":
    main()

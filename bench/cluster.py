"""Overhead of the Ray backend against the local one, on this machine: the same candidates (copies of a C++ vector
add, warm build cache) through `--gpus N` and through `--cluster` on a local Ray cluster of N nodes that declare
one logical GPU each. Runs on the CPU (pip install '.[ray]').

    python bench/cluster.py [--lanes 1] [--candidates 6 12] [--pairs 2]

Prints each run's wall, and per backend the median wall at each candidate count. With two counts it splits the
wall into a fixed start and a marginal cost per record (the slope between the counts): the per-record overhead
is the ratio of the slopes (goal: at most 1.10), the start's is the difference of the intercepts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

import _common
from _common import md_table, records, run_eval
from ray.cluster_utils import Cluster

CONFIG = _common.REPO / "tests" / "configs" / "cpu_vadd.yaml"
HONEST = _common.REPO / "tests" / "candidates" / "cpu" / "vadd_cpp.py"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lanes", type=int, default=1)
    ap.add_argument("--candidates", type=int, nargs="+", default=[6, 12])
    ap.add_argument("--pairs", type=int, default=2, help="runs per backend and count, alternating")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kbh-cluster-"))
    (base / "cands").mkdir()
    for i in range(max(args.candidates)):
        shutil.copy(HONEST, base / "cands" / f"vadd_{i:03d}.py")
    every = sorted(str(p) for p in (base / "cands").glob("*.py"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    for _ in range(args.lanes):
        cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    arms = {"local": ["--gpus", str(args.lanes)], "ray": ["--cluster", f"ray:{cluster.address}"]}
    common = [str(CONFIG), "--device", "cpu", "--cache", str(base / "cache")]
    run_eval(*common, "--solution", *every, "--out", str(base / "warm"))  # builds the cache
    rows, walls = [], {(arm, n): [] for arm in arms for n in args.candidates}
    try:
        for k in range(args.pairs):
            for n in args.candidates:
                for arm in arms if k % 2 == 0 else list(arms)[::-1]:
                    wall, out, rc = run_eval(*common, "--solution", *every[:n], *arms[arm],
                                             "--out", str(base / f"{arm}{n}-{k}"))
                    recs = records(out)
                    walls[(arm, n)].append(wall)
                    rows.append([k, arm, n, f"{wall:.1f}", len(recs), rc, sum(r["status"] == "correct" for r in recs)])
    finally:
        cluster.shutdown()
    print(md_table(["#", "backend", "candidates", "wall s", "records", "exit", "correct"], rows))
    med = {key: statistics.median(v) for key, v in walls.items()}
    print()
    print(md_table(["candidates", "local s", "ray s", "ray / local"],
                   [[n, f"{med['local', n]:.1f}", f"{med['ray', n]:.1f}", f"{med['ray', n] / med['local', n]:.2f}"]
                    for n in args.candidates]))
    if len(args.candidates) >= 2:
        lo, hi = min(args.candidates), max(args.candidates)
        slope = {arm: (med[arm, hi] - med[arm, lo]) / (hi - lo) for arm in arms}
        start = {arm: med[arm, lo] - slope[arm] * lo for arm in arms}
        print(f"\nper record (slope {lo}->{hi}): local {slope['local']:.2f} s, ray {slope['ray']:.2f} s, "
              f"ray / local = {slope['ray'] / slope['local']:.2f} (goal <= 1.10); fixed start: local "
              f"{start['local']:.1f} s, ray {start['ray']:.1f} s")
    print(f"{args.lanes} lane(s), medians of {args.pairs} runs, runs in {base}")


if __name__ == "__main__":
    main()

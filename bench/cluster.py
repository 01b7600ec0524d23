"""Overhead of the Ray backend against the local one, on this machine: the same candidates (copies of a C++ vector
add, warm build cache) through `--gpus N` and through `--cluster` on a local Ray cluster of N nodes that declare
one logical GPU each. Runs on the CPU (pip install '.[ray]').

    python bench/cluster.py [--lanes 2] [--candidates 8] [--pairs 2]

Prints each run's wall and seconds per record, and the ratio of the medians (goal: at most 1.10).
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
    ap.add_argument("--lanes", type=int, default=2)
    ap.add_argument("--candidates", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=2, help="runs per backend, alternating")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kbh-cluster-"))
    (base / "cands").mkdir()
    for i in range(args.candidates):
        shutil.copy(HONEST, base / "cands" / f"vadd_{i}.py")
    cands = sorted(str(p) for p in (base / "cands").glob("*.py"))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    for _ in range(args.lanes):
        cluster.add_node(num_cpus=1, num_gpus=1)
    cluster.wait_for_nodes()
    arms = {"local": ["--gpus", str(args.lanes)], "ray": ["--cluster", f"ray:{cluster.address}"]}
    common = [str(CONFIG), "--device", "cpu", "--cache", str(base / "cache"), "--solution", *cands]
    run_eval(*common, "--out", str(base / "warm"))  # builds the cache
    rows, per = [], {arm: [] for arm in arms}
    try:
        for k in range(args.pairs):
            for arm in arms if k % 2 == 0 else list(arms)[::-1]:
                wall, out, rc = run_eval(*common, *arms[arm], "--out", str(base / f"{arm}{k}"))
                recs = records(out)
                per[arm].append(wall / max(len(recs), 1))
                rows.append([k, arm, f"{wall:.1f}", len(recs), f"{per[arm][-1]:.2f}", rc,
                             sum(r["status"] == "correct" for r in recs)])
    finally:
        cluster.shutdown()
    print(md_table(["#", "backend", "wall s", "records", "s per record", "exit", "correct"], rows))
    local, ray = statistics.median(per["local"]), statistics.median(per["ray"])
    print(f"\nmedian s per record: local {local:.2f}, ray {ray:.2f}; ray / local = {ray / local:.2f} "
          f"(goal <= 1.10), {args.lanes} lanes, {args.candidates} candidates, runs in {base}")


if __name__ == "__main__":
    main()

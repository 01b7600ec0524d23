"""Throughput of a batch: 16 distinct honest candidates (variants of the fast kernel) in one run, cold (empty build
cache) and warm (same cache), against one cold build of a single candidate; optionally 16 new candidates (the same
kernels under other extension names) in the warm cache, which then holds torch/extension.h's precompiled header.

    python bench/throughput.py [--shapes seed] [--singles 1] [--new] [--gpus N]
    python bench/throughput.py --ab-tree DIR [--pairs 2]   # interleaved cold batches: this tree vs DIR's


Targets on the H200 host: the cold batch in at most 3x one cold build's time; the warm batch at most 3 s per
candidate. Each batch runs with --profile: the table says when the first candidate started and where the CPUs went.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

import _common
from _common import CONFIG, candidate_variant, md_table, records, run_eval, run_json

GRID = {"THREADS": (128, 256), "MAX_VEC": (8, 16), "FLAT_ITEMS": (1, 2, 4, 8)}


class CpuTrace:
    """/proc/stat sampled every half second while a batch runs: whether the builds keep every CPU busy (a cold
    batch's wall is its builds) or leave CPUs idle at its start or tail."""

    BIN_S = 5.0

    def __init__(self):
        self.samples: list[tuple[float, list[int], int]] = []
        self._stop = threading.Event()

    def _read(self) -> None:
        try:
            lines = Path("/proc/stat").read_text().splitlines()
        except OSError:
            return
        running = next((int(ln.split()[1]) for ln in lines if ln.startswith("procs_running")), 0)
        self.samples.append((time.monotonic(), [int(x) for x in lines[0].split()[1:9]], running))

    def __enter__(self):
        self._read()

        def loop() -> None:
            while not self._stop.wait(0.5):
                self._read()

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._read()

    def table(self) -> str:
        """Per BIN_S: % of all CPUs busy, split into niced processes (builds and their compilers) and the rest."""
        if len(self.samples) < 2:
            return "(no /proc/stat)"
        t0, bins = self.samples[0][0], {}
        for (_, a, _), (tb, b, run) in zip(self.samples, self.samples[1:]):
            d = [y - x for x, y in zip(a, b)]  # user nice system idle iowait irq softirq steal
            acc = bins.setdefault(int((tb - t0) // self.BIN_S), [0, 0, 0, 0, 0])
            for j, v in enumerate((sum(d), sum(d) - d[3] - d[4], d[1], run, 1)):
                acc[j] += v
        rows = [[f"{k * self.BIN_S:.0f}-{(k + 1) * self.BIN_S:.0f}", f"{100 * busy / total:.0f}", f"{100 * nice / total:.0f}",
                 f"{100 * (busy - nice) / total:.0f}", f"{run / n:.1f}"] for k, (total, busy, nice, run, n) in sorted(bins.items())]
        return md_table(["s", "busy %", "niced %", "other %", "runnable"], rows)


def summary_row(label: str, wall: float, out: Path) -> list:
    run = run_json(out)
    builds = run["builds"].values()
    recs = records(out)
    line = (run.get("profile") or {}).get("timeline_s") or {}
    launches = [r["floors"]["launch_us"] for r in recs if r.get("floors")]
    return [label, f"{wall:.0f}", f"{wall / max(1, len(builds)):.2f}", f"{max(b['seconds'] for b in builds):.0f}",
            sum(bool(b.get("memo")) for b in builds), line.get("lane0_first_candidate", "-"),
            f"{sum(r['status'] == 'correct' for r in recs)}/{len(recs)}",
            f"{statistics.median(launches):.1f}" if launches else "-"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default=None)
    ap.add_argument("--shapes", nargs="*", default=None)
    ap.add_argument("--singles", type=int, default=2, help="cold builds of one candidate for the baseline")
    ap.add_argument("--new", action="store_true", help="also a batch of new candidates in the warm cache")
    ap.add_argument("--ab-tree", type=Path, help="another checkout: cold batches and single builds alternate "
                    "between this tree's run_eval.py and its, on the same candidates (A B B A ...)")
    ap.add_argument("--pairs", type=int, default=1, help="with --ab-tree: cold batches per arm")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kbh-throughput-"))
    combos = list(itertools.product(*GRID.values()))
    cands = [str(candidate_variant(base / "candidates", "fast_t{}_v{}_i{}".format(*c), dict(zip(GRID, c)))) for c in combos]
    common = [str(CONFIG), "--device", "cuda", *(["--gpus", args.gpus] if args.gpus else []),
              *(["--shapes", *args.shapes] if args.shapes else [])]
    if args.ab_tree:
        return ab_cold(args, base, cands, common)
    rows, walls = [], {}
    for label in ("cold", "warm", "new") if args.new else ("cold", "warm"):
        batch = cands
        if label == "new":
            batch = [str(candidate_variant(base / "new", f"{Path(c).stem}_new", dict(zip(GRID, combo)), "_new"))
                     for c, combo in zip(cands, combos)]
        with CpuTrace() as trace:
            wall, out, rc = run_eval(*common, "--profile", "--solution", *batch, "--cache", str(base / "cache_batch"),
                                     "--out", str(base / label))
        walls[label] = wall
        rows.append(summary_row(f"{len(batch)} candidates, {label} cache", wall, out))
        run = run_json(out)
        print(f"\n{label} batch: {wall:.1f} s, exit code {rc}; fork server {run.get('fork_server')}; header {run.get('pch')}")
        print(f"\n{label} batch: timeline (s since run_eval.py started)\n")
        print(md_table(["event", "s"], [[k, f"{v:.1f}"] for k, v in run["profile"]["timeline_s"].items()]))
        print(f"\n{label} batch: spare workers (s since run_eval.py started): "
              + " ".join(f"{x['started_s']:.1f}-{x['ready_s']:.1f}" for x in run["profile"]["spares"]))
        stages: dict[str, list[float]] = {}
        for r in records(out):
            for k, v in (r.get("profile") or {}).get("stage_seconds", {}).items():
                stages.setdefault(k, []).append(v)
        print(f"\n{label} batch: record stages, mean s\n")
        print(md_table(["stage", "records", "mean s"], [[k, len(v), f"{sum(v) / len(v):.2f}"] for k, v in stages.items()]))
        print(f"\n{label} batch: the host's {os.cpu_count()} CPUs\n\n{trace.table()}", flush=True)
    singles = []
    for k in range(args.singles):
        wall, out, _ = run_eval(*common, "--build-only", "--solution", cands[0], "--cache", str(base / f"cache_single{k}"),
                                "--out", str(base / f"single{k}"))
        singles.append(run_json(out)["builds"][Path(cands[0]).stem]["seconds"])
        rows.insert(0, summary_row(f"one candidate, cold build only ({k + 1} of {args.singles})", wall, out))
    print(f"\nGPU: {run_json(base / 'cold')['devices']['0'].get('gpu')}; wall = whole run_eval.\n")
    print(md_table(["run", "wall s", "s per candidate", "longest build s", "no build process (memo)",
                    "first candidate at s", "correct records", "empty launch us (median of records)"], rows))
    if singles:
        print(f"\none cold build: {min(singles):.0f} s (fastest of {len(singles)}); cold batch / one cold build = "
              f"{walls['cold'] / min(singles):.2f} (target <= 3)")
    print(f"warm batch per candidate = {walls['warm'] / len(cands):.2f} s (target <= 3); runs in {base}")


def ab_cold(args, base: Path, cands: list[str], common: list[str]) -> None:
    """Cold batch / one cold build, per arm, in alternation on one host: a difference between trees measured in
    one host phase, not across calls whose hosts differ."""
    trees = {"A (this tree)": _common.REPO, f"B ({args.ab_tree})": args.ab_tree.resolve()}
    order = [arm for k in range(args.pairs) for arm in (list(trees) if k % 2 == 0 else list(trees)[::-1])]
    rows, walls = [], {arm: [] for arm in trees}
    for k, arm in enumerate(order):
        tag = f"{k}{'ab'[list(trees).index(arm)]}"
        wall, out, rc = run_eval(*common, "--solution", *cands, "--cache", str(base / f"cache_{tag}"),
                                 "--out", str(base / f"cold_{tag}"), repo=trees[arm])
        swall, sout, _ = run_eval(*common, "--build-only", "--solution", cands[0], "--cache",
                                  str(base / f"cache_single_{tag}"), "--out", str(base / f"single_{tag}"), repo=trees[arm])
        single = run_json(sout)["builds"][Path(cands[0]).stem]["seconds"]
        walls[arm].append((wall, single))
        recs = records(out)
        rows.append([k, arm, f"{wall:.1f}", f"{single:.1f}", f"{wall / single:.2f}", rc,
                     f"{sum(r['status'] == 'correct' for r in recs)}/{len(recs)}"])
        print(f"{arm}: cold batch {wall:.1f} s, single build {single:.1f} s", flush=True)
    print(md_table(["#", "arm", "cold batch s", "one cold build s", "ratio", "exit", "correct"], rows))
    for arm, ws in walls.items():
        print(f"{arm}: cold batch median {statistics.median(w for w, _ in ws):.1f} s, ratio median "
              f"{statistics.median(w / s for w, s in ws):.2f} over {len(ws)}")


if __name__ == "__main__":
    main()

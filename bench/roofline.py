"""Roofline table of pack-tokens solutions on the GPU: bytes moved, time, GB/s, the copy of the same
bytes measured in the same run, speedups, and the issue's targets.

    python bench/roofline.py [--solution FILE ...] [--out DIR] | --run RUN_DIR

Targets (issue: a pack-tokens kernel at the memory-bandwidth limit): on wide, mixtral and deepseek,
time <= 1.10 x a device-to-device copy of the same bytes, >= 3x eager, faster than torch.compile; on
seed, time <= 1.3 x (empty launch + one read of a device value to the host). Both references are timed
per shape through the candidates' own loop (refills, flush and verification between calls): the copy as
the record's `floors.copy_us`, the launch and read as `floors.read_us` (one read, then one launch).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from _common import CONFIG, FAST, md_table, records, run_eval, run_json

BIG = ("wide", "mixtral", "deepseek")


def table(out: Path) -> str:
    run = run_json(out)
    q = run["config"]["timing"].get("speedup_quantile", 0.1)
    rows = []
    for r in records(out):
        if r["status"] != "correct":
            rows.append([r["solution"], r["shape"], r["status"], "", "", "", "", "", "", "", r["message"][:60]])
            continue
        t, floors = r["timing"], r["floors"]
        mb = t["bytes_min"] / 1e6
        copy_us = floors["copy_us"]
        ratio = t["copy_ratio"]
        if r["shape"] in BIG:
            checks = [("<=1.10x copy", ratio is not None and ratio <= 1.10), (">=3x eager", r["speedup"] >= 3)]
            if r["speedup_compile"] is not None:
                checks.append((">1x compile", r["speedup_compile"] > 1))
            missed = [name for name, ok in checks if not ok]
            target = f"MISSED {', '.join(missed)}" if missed else f"met ({', '.join(n for n, _ in checks)})"
            if r["speedup_compile"] is None:
                target += "; compile not timed"
        elif r["shape"] == "seed" and floors["read_us"]:
            limit = 1.3 * floors["read_us"]
            target = f"{'met' if t['time_us'] <= limit else 'MISSED'} (<= 1.3 x {floors['read_us']:.1f} = {limit:.1f} us)"
        else:
            target = ""
        rows.append([r["solution"], r["shape"], f"{mb:.1f}", f"{t['time_us']:.1f}", f"{t['runs']}",
                     f"{t['bandwidth_gbps']:.0f}", f"{copy_us:.1f}" if copy_us else "-",
                     f"{ratio:.2f}x" if ratio else "-", f"{r['speedup']:.2f}x",
                     f"{r['speedup_compile']:.2f}x" if r["speedup_compile"] else "-", target])
    head = (f"GPU: {run['devices']['0'].get('gpu')}, torch {run['host']['torch']}. time: median us of `runs` timed "
            "calls, CUDA events, L2 flushed before each. copy, same loop: `floors.copy_us`, a device-to-device copy "
            "of the same bytes timed through the candidates' loop beside each round of the candidate's calls "
            f"(median us). time / copy: the record's `timing.copy_ratio`, the candidate's {q:g} quantile over the copies' "
            "(timing.speedup_quantile), every call of each side pooled over the rounds.")
    return head + "\n\n" + md_table(
        ["solution", "shape", "MB moved", "time us", "runs", "GB/s", "copy, same loop us", "time / copy", "vs eager", "vs compile", "target"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", nargs="*", default=[str(FAST)])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--config", default=str(CONFIG))
    ap.add_argument("--run", type=Path, default=None, help="format an existing run folder instead of running")
    args = ap.parse_args()
    if args.run:
        print(table(args.run))
        return
    sols = list(args.solution)
    out = args.out or Path(tempfile.mkdtemp(prefix="kbh-roofline-")) / "run"
    wall, out, rc = run_eval(args.config, "--device", "cuda", "--solution", *sols, "--out", str(out))
    print(table(out))
    print(f"\n(run_eval exit {rc}, {wall:.0f} s, results in {out})")


if __name__ == "__main__":
    main()

"""Which speedup estimator holds still across separate evaluations: recompute each candidate record's
speedup from its raw timed calls (the run's `times/` files) with several estimators, then print per shape
the mean and coefficient of variation across runs of each.

    python bench/estimators.py results/stability/run*

Estimators (q: the quantile of the timed calls taken on each side):
- paired q: per round, q(reference calls) / q(candidate calls); the median over rounds.
- pooled q: q(all reference calls) / q(all candidate calls) over every round (the harness's own
  `stats.pooled_ratio`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import REPO, md_table

sys.path.insert(0, str(REPO))
from harness.stats import mean_cv, pooled_ratio, quantile  # noqa: E402

QUANTILES = (0.02, 0.05, 0.1, 0.25, 0.5)


def q(xs, p: float) -> float:
    return quantile(sorted(xs), p)


def estimates(rounds: list[dict]) -> dict[str, float]:
    out = {}
    for p in QUANTILES:
        paired = [q(r["reference"], p) / q(r["candidate"], p) for r in rounds if r["reference"] and r["candidate"]]
        out[f"paired {p:g}"] = q(paired, 0.5)
        out[f"pooled {p:g}"] = pooled_ratio([r["reference"] for r in rounds], [r["candidate"] for r in rounds], p)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run folders (each with results.jsonl and times/)")
    args = ap.parse_args()
    per: dict[str, dict[str, list[float]]] = {}
    for run in args.runs:
        for line in (Path(run) / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["status"] != "correct" or not r.get("times_file"):
                continue
            path = Path(run) / "times" / Path(r["times_file"]).name
            rounds = json.loads(path.read_text())
            d = per.setdefault(r["shape"], {"record": []})
            d["record"].append(r["speedup"])
            for side in ("reference", "candidate", "copy"):
                d.setdefault(f"{side} calls per round", []).append(
                    sum(len(x[side]) for x in rounds) / max(1, len(rounds)))
            for k, v in estimates(rounds).items():
                d.setdefault(k, []).append(v)
    for shape, d in per.items():
        rows = []
        for k, v in d.items():
            m, cv = mean_cv(v)
            rows.append([k, len(v), f"{m:.3f}", f"{100 * cv:.2f}%", " ".join(f"{x:.3f}" for x in v)])
        print(f"\n{shape}\n")
        print(md_table(["estimator", "runs", "mean", "CV", "per run"], rows))


if __name__ == "__main__":
    main()

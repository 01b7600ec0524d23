"""Which speedup estimator holds still across separate evaluations: recompute each candidate record's
speedup from its raw timed calls (the run's `times/` files) with several estimators, then print per shape
the mean and coefficient of variation across runs of each.

    python bench/estimators.py results/stability/run*

Estimators (q: the quantile of the timed calls taken on each side):
- paired q: per round, q(reference calls) / q(candidate calls); the median over rounds.
- pooled q: q(all reference calls) / q(all candidate calls) over every round (`stats.pooled_ratio`).
- fast phase S, pooled q: the same over the rounds `stats.fast_phase` keeps at slack S (the harness's own
  estimator since the nineteenth session, S = timing.phase_slack).

With --stop, the same raw calls replay stopping rules instead: each round's loop (candidate, reference, copy)
cut where the rule would have stopped it, then the harness's pooled speedup and copy ratio over what is left,
and the share of calls each rule keeps (time saved is about in proportion):
- `mean T`: the loop's rule until now, relative standard error of the mean <= T * sqrt(rounds) per round.
- `quantile T`: `stats.quantile_rse` of the speedup's quantile <= T * sqrt(rounds) per round.
- `first F`: the first share F of each loop's calls (a budget F times as long).

    python bench/estimators.py --stop results/stability/run*
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import sys
from pathlib import Path

from _common import REPO, md_table

sys.path.insert(0, str(REPO))
from harness.stats import Round, fast_phase, mean_cv, pooled_ratio, quantile, quantile_rse, rse  # noqa: E402

QUANTILES = (0.02, 0.05, 0.1, 0.25, 0.5)
SLACKS = (1.1, 1.2, 1.35)
MIN_RUNS = 5  # a round's least calls (evaluate.round_loop with the config's 20 over 5 rounds)
STOP_RULES = [("all calls", None, None), ("mean 0.5%", "mean", 0.005), ("quantile 0.25%", "quantile", 0.0025),
              ("quantile 0.5%", "quantile", 0.005), ("quantile 1%", "quantile", 0.01), ("first 50%", "first", 0.5),
              ("first 25%", "first", 0.25)]


def q(xs, p: float) -> float:
    return quantile(sorted(xs), p)


def estimates(rounds: list[dict]) -> dict[str, float]:
    out = {}
    for p in QUANTILES:
        paired = [q(r["reference"], p) / q(r["candidate"], p) for r in rounds if r["reference"] and r["candidate"]]
        out[f"paired {p:g}"] = q(paired, 0.5)
        out[f"pooled {p:g}"] = pooled_ratio([r["reference"] for r in rounds], [r["candidate"] for r in rounds], p)
    for slack in SLACKS:
        keep = fast_phase([Round(reference=(), candidate=(), launch=tuple(r.get("launch") or ())) for r in rounds], slack)
        fast = [r for r, k in zip(rounds, keep) if k]
        for p in (0.05, 0.1):
            out[f"fast phase {slack:g}, pooled {p:g}"] = pooled_ratio([r["reference"] for r in fast],
                                                                      [r["candidate"] for r in fast], p)
    return out


def kept(calls: list[float], kind: str | None, arg: float | None, rounds: int, q: float) -> int:
    """How many of a loop's calls (in the order they ran) a stopping rule keeps."""
    n = len(calls)
    if kind is None:
        return n
    if kind == "first":
        return max(min(n, MIN_RUNS), math.ceil(arg * n))
    target = arg * math.sqrt(rounds)
    seen: list[float] = []
    for m, x in enumerate(calls, 1):
        bisect.insort(seen, x)
        if m >= MIN_RUNS and (rse(seen) if kind == "mean" else quantile_rse(seen, q)) <= target:
            return m
    return n


def replay(rounds: list[dict], kind: str | None, arg: float | None, q: float) -> dict[str, float | None]:
    cut = [{side: r[side][: kept(r[side], kind, arg, len(rounds), q)] for side in ("reference", "candidate", "copy")}
           for r in rounds]
    out = {"speedup": pooled_ratio([r["reference"] for r in cut], [r["candidate"] for r in cut], q),
           "copy ratio": pooled_ratio([r["candidate"] for r in cut], [r["copy"] for r in cut], q)
           if all(r["copy"] for r in cut) else None}
    for side in ("candidate", "reference", "copy"):
        full = sum(len(r[side]) for r in rounds)
        out[f"{side} kept"] = sum(len(r[side]) for r in cut) / full if full else None
    return out


def stop_table(per: dict[str, list[list[dict]]], q: float) -> None:
    for shape, runs in per.items():
        rows = []
        for name, kind, arg in STOP_RULES:
            got = [replay(rounds, kind, arg, q) for rounds in runs]
            row = [name, len(got)]
            for key in ("speedup", "copy ratio"):
                v = [g[key] for g in got if g[key] is not None]
                row += [f"{mean_cv(v)[0]:.3f}", f"{100 * mean_cv(v)[1]:.2f}%"] if len(v) == len(got) else ["", ""]
            for side in ("candidate", "reference", "copy"):
                v = [g[f"{side} kept"] for g in got if g[f"{side} kept"] is not None]
                row.append(f"{100 * sum(v) / len(v):.0f}%" if v else "")
            rows.append(row)
        print(f"\n{shape}: stopping rules replayed on the raw calls, q = {q:g}\n")
        print(md_table(["rule", "runs", "speedup mean", "speedup CV", "copy ratio mean", "copy ratio CV",
                        "candidate calls kept", "reference calls kept", "copy calls kept"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="run folders (each with results.jsonl and times/)")
    ap.add_argument("--stop", action="store_true", help="replay stopping rules instead of comparing estimators")
    ap.add_argument("--quantile", type=float, default=0.1, help="the speedup's quantile (timing.speedup_quantile)")
    args = ap.parse_args()
    per: dict[str, dict[str, list[float]]] = {}
    raw: dict[str, list[list[dict]]] = {}
    for run in args.runs:
        for line in (Path(run) / "results.jsonl").read_text().splitlines():
            r = json.loads(line)
            if r["status"] != "correct" or not r.get("times_file"):
                continue
            path = Path(run) / "times" / Path(r["times_file"]).name
            rounds = json.loads(path.read_text())
            raw.setdefault(r["shape"], []).append(rounds)
            d = per.setdefault(r["shape"], {"record": []})
            d["record"].append(r["speedup"])
            for side in ("reference", "candidate", "copy"):
                d.setdefault(f"{side} calls per round", []).append(
                    sum(len(x[side]) for x in rounds) / max(1, len(rounds)))
            for k, v in estimates(rounds).items():
                d.setdefault(k, []).append(v)
    if args.stop:
        stop_table(raw, args.quantile)
        return
    for shape, d in per.items():
        rows = []
        for k, v in d.items():
            m, cv = mean_cv(v)
            rows.append([k, len(v), f"{m:.3f}", f"{100 * cv:.2f}%", " ".join(f"{x:.3f}" for x in v)])
        print(f"\n{shape}\n")
        print(md_table(["estimator", "runs", "mean", "CV", "per run"], rows))


if __name__ == "__main__":
    main()

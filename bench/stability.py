"""Stability of the speedup: the same candidate through N separate evaluations (fresh processes, fresh seeds,
fresh reference timings), then per shape the mean and coefficient of variation.

    python bench/stability.py [--solution FILE] [--runs 5] [--shapes seed wide mixtral deepseek]
    python bench/stability.py --arm rounds=9 --runs 5              # an A/B: timing keys overridden in a second arm
    python bench/stability.py --env CUDA_DEVICE_MAX_CONNECTIONS=1  # an A/B: environment variables in a second arm

Targets on the H200: CV <= 1% on shapes over 50 us, <= 3% on the seed shape. With two arms the runs alternate
between them, so a drift of the machine over the session lands on both.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
from pathlib import Path

import yaml
from _common import CONFIG, FAST, md_table, records, run_eval, run_json

from harness.stats import mean_cv

HEADER = ["shape", "runs", "speedup mean", "speedup CV", "median of round ratios CV", "95% CI half-width mean",
          "runs with CI over 1", "time us mean", "time CV", "reference us CV", "empty launch us (min-max)", "target"]


def render(per_shape: dict, device: str, name: str, label: str) -> str:
    rows = []
    for shape, d in per_shape.items():
        if len(d["speedup"]) < 2:
            rows.append([shape, len(d["speedup"])] + [""] * (len(HEADER) - 3) + ["not enough correct runs"])
            continue
        sm, scv = mean_cv(d["speedup"])
        tm, tcv = mean_cv(d["time"])
        limit = 0.03 if shape == "seed" or tm <= 50 else 0.01
        rcv = f"{100 * mean_cv(d['round_ratio'])[1]:.2f}%" if len(d["round_ratio"]) > 1 else ""
        half = [(ci[1] - ci[0]) / 2 / s for ci, s in zip(d["ci"], d["speedup"]) if ci]
        over = f"{sum(ci[0] > 1 for ci in d['ci'] if ci)}/{sum(1 for ci in d['ci'] if ci)}"
        rows.append([shape, len(d["speedup"]), f"{sm:.3f}x", f"{100 * scv:.2f}%", rcv,
                     f"{100 * statistics.mean(half):.2f}%" if half else "", over, f"{tm:.1f}", f"{100 * tcv:.2f}%",
                     f"{100 * mean_cv(d['ref'])[1]:.2f}%", f"{min(d['launch']):.1f}-{max(d['launch']):.1f}",
                     f"{'met' if scv <= limit else 'MISSED'} (CV <= {100 * limit:.0f}%)"])
    return (f"\n{label}: {len(next(iter(per_shape.values()))['speedup'])} separate evaluations of {name} on {device}; "
            "'median of round ratios': the median over a record's rounds of each round's reference median over its "
            "candidate median, for comparison with the speedup's pooled low quantile.\n\n" + md_table(HEADER, rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(FAST))
    ap.add_argument("--runs", type=int, default=5, help="evaluations per arm")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", nargs="*", default=None)
    ap.add_argument("--arm", nargs="*", default=None, metavar="KEY=VALUE", help="a second arm: timing keys (YAML values)")
    ap.add_argument("--env", nargs="*", default=None, metavar="KEY=VALUE", help="a second arm: environment variables")
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    ap.add_argument("--static-checks", default=None, help="passed on (off: a torch-only candidate, e.g. "
                    "bench/reference_candidate.py, the reference's own code, for the near-tie figures)")
    args = ap.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kbh-stability-"))
    base.mkdir(parents=True, exist_ok=True)
    timing = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.arm or [])}
    env = dict(kv.split("=", 1) for kv in args.env or [])
    arms = [("as configured", {}, {})] + ([(" ".join(args.arm + (args.env or [])), timing, env)] if timing or env else [])
    data: list[dict] = [{} for _ in arms]
    device = ""
    for i in range(args.runs):
        for k, (label, tim, extra) in enumerate(arms):
            # the work that does not bear on speedup noise is cut: two correctness seeds, no torch.compile reference
            config = base / f"arm{k}.yaml"
            cfg = yaml.safe_load(args.config.read_text())
            cfg["problem"] = str((args.config.resolve().parent / cfg["problem"]).resolve())
            cfg["solutions"] = {}
            cfg.setdefault("check", {})["seeds"] = 2
            cfg.setdefault("timing", {}).update({"compile_reference": False} | tim)
            config.write_text(yaml.safe_dump(cfg))
            shutil.rmtree(base / f"arm{k}-run{i}", ignore_errors=True)  # run_eval continues a folder's records
            wall, out, rc = run_eval(str(config), "--device", args.device, "--solution", args.solution,
                                     *(["--shapes", *args.shapes] if args.shapes else []),
                                     *(["--static-checks", args.static_checks] if args.static_checks else []), "--out",
                                     str(base / f"arm{k}-run{i}"), env=extra)
            device = run_json(out)["devices"]["0"].get("gpu") or "cpu"
            for r in records(out):
                t, f = r["timing"] or {}, r["floors"] or {}
                print(f"  {r['shape']}: {r['status']}, time {t.get('time_us')} us, reference {t.get('ref_time_us')} us, "
                      f"floors {f}, speedup {r['speedup']}, time/copy {t.get('copy_ratio')}", flush=True)
                if r["status"] != "correct":
                    continue
                d = data[k].setdefault(r["shape"], {"speedup": [], "time": [], "ref": [], "round_ratio": [], "launch": [],
                                                    "ci": []})
                rounds = (r["diagnostics"] or {}).get("rounds") or []
                d["speedup"].append(r["speedup"])
                d["ci"].append(r.get("speedup_ci"))
                d["time"].append(t["time_us"])
                d["ref"].append(t["ref_time_us"])
                d["launch"].append(f["launch_us"])
                if rounds:
                    d["round_ratio"].append(statistics.median(x["reference_us"] / x["time_us"] for x in rounds))
            print(f"run {i} ({label}): {wall:.0f} s, exit {rc}", flush=True)
            for (lab, _, _), per_shape in zip(arms, data):
                if per_shape:
                    print(render(per_shape, device, Path(args.solution).name, lab), flush=True)


if __name__ == "__main__":
    main()

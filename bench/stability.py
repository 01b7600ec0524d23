"""Stability of the speedup: the same candidate through N separate evaluations (fresh processes, fresh
seeds, fresh reference timings), then per shape the mean and coefficient of variation.

    python bench/stability.py [--solution FILE] [--runs 5] [--config configs/pack_tokens.yaml]

Targets on the H200: CV <= 1% on shapes over 50 us, <= 3% on the seed shape.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from _common import REPO, md_table, records, run_eval, run_json

sys.path.insert(0, str(REPO))
from harness.config import load_config  # noqa: E402
from harness.stats import mean_cv  # noqa: E402


def render(per_shape: dict, device: str, name: str, runs: int, quantile: float) -> str:
    """The table so far: printed after every evaluation, so a cut-short session still leaves one."""
    rows = []
    for shape, d in per_shape.items():
        if len(d["speedup"]) < 2:
            rows.append([shape, len(d["speedup"]), "", "", "", "", "", "", "not enough correct runs"])
            continue
        sm, scv = mean_cv(d["speedup"])
        tm, tcv = mean_cv(d["time_us"])
        _, rcv = mean_cv(d["ref"])
        limit = 0.03 if shape == "seed" else (0.01 if tm > 50 else 0.03)
        acv = f"{100 * mean_cv(d['all_rounds'])[1]:.2f}%" if len(d["all_rounds"]) == len(d["speedup"]) else ""
        rows.append([shape, len(d["speedup"]), f"{sm:.3f}x", f"{100 * scv:.2f}%", acv, f"{tm:.1f}", f"{100 * tcv:.2f}%",
                     f"{100 * rcv:.2f}%", f"{'met' if scv <= limit else 'MISSED'} (CV <= {100 * limit:.0f}%)"])
    return (f"\n{runs} separate evaluations of {name} on {device}; a record's speedup is its reference's "
            f"{quantile:g} quantile over its candidate's (timing.speedup_quantile), every call of each side pooled "
            "over the rounds; 'CV, median ratio' is that of the median over a run's rounds of the per-round ratio of medians, the estimator before (L2 or cache flushed before each call).\n\n"
            + md_table(["shape", "runs", "speedup mean", "speedup CV", "CV, median ratio", "time us mean", "time CV",
                        "reference time CV", "target"], rows))


def lean_config(path: Path, folder: Path, timing: dict) -> Path:
    """The config with its timing settings kept and the work that does not bear on speedup noise cut:
    two correctness seeds instead of five, no torch.compile reference; `timing` overrides timing keys."""
    import yaml

    data = yaml.safe_load(path.read_text())
    base = path.resolve().parent
    data["problem"] = str((base / data["problem"]).resolve())
    data["solutions"] = {}
    data.setdefault("check", {})["seeds"] = 2
    data.setdefault("timing", {})["compile_reference"] = False
    data["timing"].update(timing)
    out = folder / "stability.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--config", default=str(REPO / "configs" / "pack_tokens.yaml"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=None, help="override timing.rounds")
    ap.add_argument("--budget", type=float, default=None, help="override timing.budget_s")
    ap.add_argument("--quantile", type=float, default=None, help="override timing.speedup_quantile")
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kbh-stability-"))
    base.mkdir(parents=True, exist_ok=True)
    overrides = {k: v for k, v in (("rounds", args.rounds), ("budget_s", args.budget),
                                   ("speedup_quantile", args.quantile)) if v is not None}
    config = lean_config(Path(args.config), base, overrides)
    quantile = load_config(config).timing.speedup_quantile
    per_shape: dict[str, dict[str, list[float]]] = {}
    device = ""
    for i in range(args.runs):
        wall, out, rc = run_eval(str(config), "--device", args.device, "--solution", args.solution,
                                 *(["--shapes", *args.shapes] if args.shapes else []), "--out", str(base / f"run{i}"))
        device = run_json(out)["devices"]["0"].get("gpu") or "cpu"
        for r in records(out):
            print(f"  {r['shape']}: {r['status']}, time {r.get('time_us')} us, reference {r.get('ref_time_us')} us, "
                  f"floors launch {r.get('floor_launch_us')} read {r.get('floor_read_us')} copy {r.get('floor_copy_us')} "
                  f"us, speedup {r.get('speedup')} (rounds {r.get('speedup_rounds')}), "
                  f"time/copy {r.get('copy_ratio')}", flush=True)
            d = per_shape.setdefault(r["shape"], {"speedup": [], "time_us": [], "ref": [], "all_rounds": []})
            if r["status"] == "correct":
                d["speedup"].append(r["speedup"])
                if r.get("rounds"):
                    d["all_rounds"].append(statistics.median(x["reference_us"] / x["time_us"] for x in r["rounds"]))
                d["time_us"].append(r["time_us"])
                d["ref"].append(r["ref_time_us"])
        print(f"run {i}: {wall:.0f} s, exit {rc}", flush=True)
        print(render(per_shape, device, Path(args.solution).name, i + 1, quantile), flush=True)


if __name__ == "__main__":
    main()

"""Stability of the speedup: the same candidate through N separate evaluations (fresh processes, fresh
seeds, fresh reference timings), then per shape the mean and coefficient of variation.

    python bench/stability.py [--solution FILE] [--runs 5] [--config configs/pack_tokens.yaml]
    python bench/stability.py --budget 0.5 1.0 --runs 5    # an A/B: the budgets take turns, run by run
    python bench/stability.py --env CUDA_DEVICE_MAX_CONNECTIONS=1 --runs 5   # an A/B: without and with the variables

Targets on the H200: CV <= 1% on shapes over 50 us, <= 3% on the seed shape. With several budgets the runs
alternate between them (0.5, 1.0, 0.5, 1.0, ...), so a drift of the machine over the session lands on both.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from _common import REPO, md_table, records, run_eval, run_json, with_timing

sys.path.insert(0, str(REPO))
from harness.config import load_config  # noqa: E402
from harness.stats import mean_cv, pooled_ratio  # noqa: E402

HEADER = ["shape", "runs", "speedup mean", "speedup CV", "CV, flagged left out (runs)", "CV, every round",
          "CV, median ratio", "time us mean", "time CV", "reference time CV", "runs with extra rounds (rounds)",
          "slow_host_phase", "target"]


def render(per_shape: dict, device: str, name: str, runs: int, quantile: float) -> str:
    """The table so far: printed after every evaluation, so a cut-short session still leaves one."""
    rows = []
    for shape, d in per_shape.items():
        if len(d["speedup"]) < 2:
            rows.append([shape, len(d["speedup"])] + [""] * (len(HEADER) - 3) + ["not enough correct runs"])
            continue
        sm, scv = mean_cv(d["speedup"])
        tm, tcv = mean_cv(d["time_us"])
        _, rcv = mean_cv(d["ref"])
        limit = 0.03 if shape == "seed" else (0.01 if tm > 50 else 0.03)
        acv = f"{100 * mean_cv(d['all_rounds'])[1]:.2f}%" if len(d["all_rounds"]) == len(d["speedup"]) else ""
        ecv = f"{100 * mean_cv(d['every_round'])[1]:.2f}%" if len(d["every_round"]) == len(d["speedup"]) else ""
        ucv = f"{100 * mean_cv(d['unflagged'])[1]:.2f}% ({len(d['unflagged'])})" if len(d["unflagged"]) > 1 else ""
        rows.append([shape, len(d["speedup"]), f"{sm:.3f}x", f"{100 * scv:.2f}%", ucv, ecv, acv, f"{tm:.1f}", f"{100 * tcv:.2f}%",
                     f"{100 * rcv:.2f}%", f"{sum(x > 0 for x in d['extra'])} ({sum(d['extra'])})", d["flagged"],
                     f"{'met' if scv <= limit else 'MISSED'} (CV <= {100 * limit:.0f}%)"])
    return (f"\n{runs} separate evaluations of {name} on {device}; a record's speedup is its reference's "
            f"{quantile:g} quantile over its candidate's (timing.speedup_quantile), every call of each side pooled "
            "over the rounds in the host's fast phase (timing.phase_slack); 'CV, every round': the same quantiles over "
            "every round, slow phases included; 'CV, flagged left out': without the records flagged slow_host_phase; "
            "'CV, median ratio': the median over a run's rounds of the per-round "
            "ratio of medians, the estimator before (L2 or cache flushed before each call).\n\n"
            + md_table(HEADER, rows))


def lean_config(path: Path, folder: Path, timing: dict, name: str = "stability.yaml") -> Path:
    """The config with its timing settings kept and the work that does not bear on speedup noise cut:
    two correctness seeds instead of five, no torch.compile reference; `timing` overrides timing keys."""
    return with_timing(path, folder, {"compile_reference": False} | timing, name, check={"seeds": 2})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--runs", type=int, default=5, help="evaluations per budget")
    ap.add_argument("--config", default=str(REPO / "configs" / "pack_tokens.yaml"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--shapes", nargs="*", default=None)
    ap.add_argument("--rounds", type=int, default=None, help="override timing.rounds")
    ap.add_argument("--budget", type=float, nargs="*", default=None,
                    help="override timing.budget_s; several values: the runs alternate between them")
    ap.add_argument("--quantile", type=float, default=None, help="override timing.speedup_quantile")
    ap.add_argument("--phase-slack", type=float, default=None, help="override timing.phase_slack")
    ap.add_argument("--env", nargs="*", default=None, metavar="KEY=VALUE",
                    help="a second arm with these environment variables (the judge's and its workers', "
                         "but workers always get PYTHONHASHSEED=0); "
                         "the runs alternate between the two")
    ap.add_argument("--timing-arm", nargs="*", default=None, metavar="KEY=VALUE",
                    help="a second arm with these timing keys overridden (YAML values); the runs alternate")
    ap.add_argument("--out", default=None, help="keep the runs here (default: a temporary folder)")
    args = ap.parse_args()
    base = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="kbh-stability-"))
    base.mkdir(parents=True, exist_ok=True)
    overrides = {k: v for k, v in (("rounds", args.rounds), ("speedup_quantile", args.quantile),
                                   ("phase_slack", args.phase_slack)) if v is not None}
    arms = []  # (label, file-name tag, config, per-shape figures, environment)
    extra = dict(kv.split("=", 1) for kv in args.env) if args.env else None
    if args.timing_arm:
        import yaml

        tweak = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.timing_arm)}
        for tag, t in (("as-run", {}), ("arm", tweak)):
            config = lean_config(Path(args.config), base, overrides | t, f"stability-{tag}.yaml")
            arms.append((" ".join(f"{k}={v}" for k, v in t.items()) or "as configured", tag, config, {}, None))
    for b in [] if args.timing_arm else args.budget or [None]:
        for env in [None, extra] if extra else [None]:
            label = " ".join(filter(None, [f"budget {b:g} s" if b is not None else "",
                                           " ".join(f"{k}={v}" for k, v in env.items()) if env else ""]))
            tag = "-".join(filter(None, [f"budget{b:g}".replace(".", "p") if b is not None else "",
                                         "env" if env else ("noenv" if extra else "")]))
            config = lean_config(Path(args.config), base, overrides | ({"budget_s": b} if b is not None else {}),
                                 f"stability{'-' + tag if tag else ''}.yaml")
            arms.append((label, tag, config, {}, env))
    timing = load_config(arms[0][2]).timing
    quantile, rounds = timing.speedup_quantile, timing.rounds
    device = ""
    for i in range(args.runs):
        for k, (_, tag, config, per_shape, env) in enumerate(arms):
            folder = base / (f"{tag}-run{i}" if tag else f"run{i}")
            wall, out, rc = run_eval(str(config), "--device", args.device, "--solution", args.solution,
                                     *(["--shapes", *args.shapes] if args.shapes else []), "--out", str(folder),
                                     env=env)
            device = run_json(out)["devices"]["0"].get("gpu") or "cpu"
            for r in records(out):
                print(f"  {r['shape']}: {r['status']}, time {r.get('time_us')} us, reference {r.get('ref_time_us')} us, "
                      f"floors launch {r.get('floor_launch_us')} read {r.get('floor_read_us')} copy {r.get('floor_copy_us')} "
                      f"us, speedup {r.get('speedup')} (rounds {r.get('speedup_rounds')}), "
                      f"time/copy {r.get('copy_ratio')}, {r.get('eval_seconds') or 0:.2f} s", flush=True)
                d = per_shape.setdefault(r["shape"], {"speedup": [], "time_us": [], "ref": [], "all_rounds": [],
                                                      "every_round": [], "extra": [], "flagged": 0,
                                                      "unflagged": []})
                if r["status"] == "correct":
                    d["speedup"].append(r["speedup"])
                    d["extra"].append(max(0, len(r.get("rounds") or []) - rounds))
                    d["flagged"] += "slow_host_phase" in r["flags"]
                    if "slow_host_phase" not in r["flags"]:
                        d["unflagged"].append(r["speedup"])
                    if r.get("rounds"):
                        d["all_rounds"].append(statistics.median(x["reference_us"] / x["time_us"] for x in r["rounds"]))
                    if r.get("times_file"):
                        raw = json.loads(Path(r["times_file"]).read_text())
                        every = pooled_ratio([c["reference"] for c in raw], [c["candidate"] for c in raw], quantile)
                        if every is not None:
                            d["every_round"].append(every)
                    d["time_us"].append(r["time_us"])
                    d["ref"].append(r["ref_time_us"])
            print(f"run {i}{' ' + tag if tag else ''}: {wall:.0f} s, exit {rc}", flush=True)
            for j, (label, _, _, ps, _) in enumerate(arms):
                if ps:
                    done = i + 1 if j <= k else i
                    print((f"\n{label or 'as run'}:" if len(arms) > 1 else "")
                          + render(ps, device, Path(args.solution).name, done, quantile), flush=True)


if __name__ == "__main__":
    main()

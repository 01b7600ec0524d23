"""The adversarial suite as a table, for a closing note: every cheat in tests/candidates/cheats (and, on a GPU,
tests/candidates/gpu) with the honest controls, at every shape of the adversarial config, once with static checks
off and once with the default policy. Each row: status, speedup and flags. Then what verification costs the honest
controls: timed calls, verified calls, and the wall seconds of the verify and judge's-clock steps against the
record's whole evaluation.

    python bench/cheats.py --device cpu [--modes off strict] [--out DIR]
    python bench/cheats.py --device cuda

Ends with one line: how many cheat records were `correct` (none should be, but for the cheats the suite lists as
caught only where a sandbox runs), and whether every honest control was correct with no integrity flag (a
control with no kernel of its own: rejected by strict static checks for that alone).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _common import REPO, md_table, records, run_eval

from harness.judge.verdict import INFO

CANDIDATES = REPO / "tests" / "candidates"
CONFIGS = REPO / "tests" / "configs"
HONEST = {"cpu": [CANDIDATES / "honest" / "python_cpu.py", CANDIDATES / "honest" / "temp_files.py"],
          "cuda": [REPO / "bench" / "reference_candidate.py", REPO / "solutions" / "pack_tokens" / "fast_vec16.py"]}
GPU_CHEATS = ["side_stream.py", "stale_device_memory.py", "pointer_cache_device.py"]
TORCH_ONLY = {"reference_candidate"}
"""Honest controls with no kernel of their own: strict static checks reject them (static:no_custom_kernel) by
design, so under strict that rejection alone is their expected verdict."""
CORRECT_OK = {"alias_input", "escaped_daemon", "read_run", "stale_device_memory"}
"""Cheats that stay correct by design where their route is closed: the alias is refused by torch before it can
cheat, the daemon never runs, the reads find nothing, and stale memory is honest at a shape with no padding."""


def candidates(device: str) -> list[str]:
    cands = sorted(str(p) for p in (CANDIDATES / "cheats").glob("*.py"))
    if device == "cuda":
        cands += [str(CANDIDATES / "gpu" / name) for name in GPU_CHEATS]
    return cands + [str(h) for h in HONEST[device]]


def honest_names(device: str) -> set[str]:
    return {Path(h).stem for h in HONEST[device]}


def honest_as_expected(name: str, mode: str, status: str, flags: list[str]) -> bool:
    if name in TORCH_ONLY and mode == "strict":
        return status == "rejected" and bool(flags) and all(f.startswith("static:no_custom_kernel") for f in flags)
    return status == "correct" and not [f for f in flags if f not in INFO]


def cost_row(r: dict) -> list:
    t, prof = r.get("timing") or {}, r.get("profile") or {}
    stages = prof.get("stage_seconds") or {}
    verify, clock, whole = stages.get("verify", 0.0), stages.get("judge_clock", 0.0), prof.get("eval_seconds")
    share = f"{(verify + clock) / whole:.0%}" if whole else "-"
    return [r["solution"], r["shape"], t.get("runs"), t.get("verified_calls"), f"{verify:.2f}", f"{clock:.2f}",
            whole, share]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--modes", nargs="+", default=["off", "strict"], choices=("off", "warn", "strict"),
                    help="static-check policies to run the suite under (strict is the default policy)")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "bench-cheats")
    args = ap.parse_args()
    config = CONFIGS / f"{'gpu' if args.device == 'cuda' else 'cpu'}_adversarial.yaml"
    honest, rows, costs, honest_ok = honest_names(args.device), [], [], True
    args.out.mkdir(parents=True, exist_ok=True)
    for mode in args.modes:
        out = args.out / f"{args.device}-{mode}"
        wall, out, rc = run_eval(str(config), "--device", args.device, "--static-checks", mode, "--profile",
                                 "--out", str(out), "--solution", *candidates(args.device), log=args.out / f"{mode}.log")
        recs = records(out)
        print(f"static checks {mode}: {len(recs)} records in {wall:.0f} s (rc {rc}, log {args.out / (mode + '.log')})")
        for r in sorted(recs, key=lambda r: (r["solution"] not in honest, r["solution"], r["shape"])):
            flags = r.get("flags") or []
            rows.append([r["solution"], r["shape"], mode, r["status"], r.get("speedup"), " ".join(flags) or "-"])
            if r["solution"] in honest:
                honest_ok &= honest_as_expected(r["solution"], mode, r["status"], flags)
                costs.append(cost_row(r))
    print(md_table(["candidate", "shape", "static checks", "status", "speedup", "flags"], rows))
    print()
    print(md_table(["honest", "shape", "timed calls", "verified", "verify s", "judge's clock s", "eval s",
                    "share"], costs))
    cheats_correct = sum(1 for r in rows if r[3] == "correct" and r[0] not in honest | CORRECT_OK)
    verdict = "PASS" if not cheats_correct and honest_ok and rows else "FAIL"
    print(f"CHEATS {verdict} on {args.device}: {cheats_correct} cheat record(s) correct outside {sorted(CORRECT_OK)}; "
          f"honest controls {'correct and unflagged' if honest_ok else 'NOT all correct and unflagged'}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())

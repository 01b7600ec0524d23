"""Seconds per `Evaluator.evaluate` call in one process, the same problem each call (an RL loop's pattern): the
first call times the reference with torch.compile, later ones reuse that figure (the Evaluator's baseline) and
draw fresh seeds. Target: a warm call at most half the first on CPU; on the GPU at most 2 s plus the candidate's
own timing budget.

    python bench/warm_evaluator.py [--device cpu|cuda] [--calls 4] [--cluster ray]

With --cluster, the Evaluator's calls go to lane actors it keeps between calls (a local Ray instance with
--lanes logical GPUs where no cluster runs).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from _common import REPO, md_table

import harness

CONFIGS = {
    "cpu": ("tests/configs/cpu_vadd.yaml", "tests/candidates/cpu/vadd_cpp.py"),
    "cuda": ("configs/pack_tokens.yaml", "solutions/pack_tokens/fast_vec16.py"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", choices=sorted(CONFIGS))
    ap.add_argument("--calls", type=int, default=4)
    ap.add_argument("--cluster", default=None, help="ray or ray:ADDRESS")
    ap.add_argument("--lanes", type=int, default=1, help="logical GPUs of a new local Ray instance (CPU runs)")
    a = ap.parse_args()
    config, candidate = (REPO / p for p in CONFIGS[a.device])
    with tempfile.TemporaryDirectory(prefix="kbh-warm-") as tmp:
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(config.read_text().replace("compile_reference: false", "compile_reference: true")
                       .replace("../problems/", f"{config.parent.parent / 'problems'}/"))
        rows = []
        extra = {"cluster": a.cluster, "gpus": a.lanes} if a.cluster else {}
        with harness.Evaluator(device=a.device, shapes=None if a.device == "cpu" else ["seed"], **extra) as ev:
            for k in range(a.calls):
                t0 = time.monotonic()
                recs = ev.evaluate(cfg, [str(candidate)])
                rows.append([k + 1, round(time.monotonic() - t0, 2), ", ".join(r["status"] for r in recs)])
    print(f"Evaluator.evaluate, {a.device}{', cluster ' + a.cluster if a.cluster else ''}, {candidate.name} on "
          f"{config.name}")
    print(md_table(["call", "seconds", "statuses"], rows))
    print(f"warm / first: {min(r[1] for r in rows[1:]) / rows[0][1]:.2f}" if len(rows) > 1 else "")


if __name__ == "__main__":
    main()

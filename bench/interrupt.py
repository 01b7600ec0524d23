"""Ctrl-C, as a user presses it: a run of an honest candidate and one that hangs, interrupted once the first record
is written; the seconds from SIGINT to the acknowledgment line and to the process's exit, median of N runs; then
the interrupted run resumed with `--resume DIR` alone, its records compared with an uninterrupted run of the
same seed (same verdicts, none twice).

    python bench/interrupt.py [--runs 5] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, records

CANDS = [REPO / "tests" / "candidates" / "honest" / "python_cpu.py", REPO / "tests" / "candidates" / "broken" / "hangs.py"]
CONFIG = REPO / "tests" / "configs" / "cpu_tiny.yaml"


def interrupted(out: Path, device: str, seed: int) -> tuple[float, float, int]:
    p = subprocess.Popen([sys.executable, str(REPO / "run_eval.py"), str(CONFIG), "--device", device, "--shapes",
                          "tiny", "--seed", str(seed), "--out", str(out), "--solution", *map(str, CANDS)],
                         cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, bufsize=1)
    res = out / "results.jsonl"
    while p.poll() is None and not (res.exists() and res.read_text().strip()):
        time.sleep(0.05)
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    p.stderr.readline()
    ack = time.monotonic() - t0
    p.wait()
    return ack, time.monotonic() - t0, p.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kbh-interrupt-"))
    acks, ends = [], []
    for i in range(a.runs):
        ack, end, rc = interrupted(tmp / f"run{i}", a.device, 7)
        print(f"run {i}: acknowledged after {ack:.2f} s, ended after {end:.2f} s, exit {rc}")
        acks.append(ack)
        ends.append(end)
    print(f"Ctrl-C to acknowledgment: median {statistics.median(acks):.2f} s; to exit: median "
          f"{statistics.median(ends):.2f} s (max {max(ends):.2f} s) over {a.runs} runs, device {a.device}")
    subprocess.run([sys.executable, str(REPO / "run_eval.py"), "--resume", str(tmp / "run0")], cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    subprocess.run([sys.executable, str(REPO / "run_eval.py"), str(CONFIG), "--device", a.device, "--shapes", "tiny",
                    "--seed", "7", "--out", str(tmp / "whole"), "--solution", *map(str, CANDS)], cwd=REPO,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    resumed, whole = records(tmp / "run0"), records(tmp / "whole")
    verdicts = [sorted((r["solution"], r["shape"], r["status"], tuple(r["flags"])) for r in rs)
                for rs in (resumed, whole)]
    same = verdicts[0] == verdicts[1] and len(resumed) == len({(r["solution"], r["shape"]) for r in resumed})
    print(f"resumed run: {json.dumps(verdicts[0])}; uninterrupted: {json.dumps(verdicts[1])}; "
          f"{'same verdicts, no record twice' if same else 'DIFFERENT'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""The GPU acceptance run, from a fresh state (a new HOME, an empty build cache, no Triton or inductor cache), from
the repo root, as a new user's first run on a new machine would be:

1. main: the README's main command (the bundled problem, cold builds included): every record written, fast_vec16
   correct with no integrity flag at every shape, no harness_error; its wall seconds (target 90 s).
2. reftime: reference timings within 5% of plain PyTorch (bench/reftime.py, as tests/gpu/test_reference_timing.py).
3. suite: a `--problems` suite of our own KernelBench-format problems with honest CUDA kernels of several costs
   (bench/acceptance/, no torch.compile reference): every record correct, no integrity flag.
4. triton: bench/suite.py's 20 problems with Triton candidates, one pass: every record correct.
5. tests: the `gpu` tests that reuse the main run (bundled solutions, Triton backends, draws, reference timing), and
   the allowlist sandbox on a CUDA run.

    python bench/acceptance.py [--deadline 540] [--out DIR] [--skip STEP ...]

Ends with one line, `ACCEPTANCE PASS` or `ACCEPTANCE FAIL`, naming each step's result and the device.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, records

INFO = {"launch_bound", "not_graph_safe", "own_kernel_not_launched", "unstable", "weak_check"}
CAP_S = {"main": 150, "reftime": 210, "suite": 180, "triton": 240}  # a step that hangs leaves the others time
TESTS = ["tests/gpu/test_gpu_harness.py", "tests/gpu/test_backends.py", "tests/gpu/test_problem_draw.py",
         "tests/gpu/test_sandbox_gpu.py", "-k", "fast_solution or original_kernel or reference_timed or floors_and_flush "
         "or forked_from_a_server or triton or draw or nowhere_else"]  # tests/gpu/test_reference_timing.py is step 2


def integrity(r: dict) -> list[str]:
    return [f for f in r.get("flags") or [] if f not in INFO]


def run(cmd: list[str], log: Path, env: dict, timeout: float) -> tuple[int, float]:
    t0 = time.monotonic()
    with open(log, "w") as f:
        try:
            rc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    return rc, time.monotonic() - t0


def check_records(recs: list[dict], want: int) -> tuple[bool, str]:
    bad = [f"{r.get('problem')}/{r['solution']}/{r['shape']}: {r['status']} {integrity(r)} {r['message'][:120]}"
           for r in recs if r["status"] != "correct" or integrity(r)]
    info = sorted({f for r in recs for f in r.get("flags") or [] if f in INFO})
    ok = not bad and len(recs) == want
    return ok, f"{len(recs) - len(bad)}/{want} correct, {len(bad)} flagged or failed" + (
        f" (info: {', '.join(info)})" if info else "") + ("; " + "; ".join(bad[:4]) if bad else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deadline", type=float, default=540.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--skip", nargs="*", default=[])
    ap.add_argument("--reftime-variants", default="plain", help="bench/reftime.py's --variants (diagnosis)")
    a = ap.parse_args()
    start = time.monotonic()
    out = (a.out or Path(tempfile.mkdtemp(prefix="kbh-acceptance-"))).resolve()
    if out.exists() and any(out.iterdir()):  # a run keeps the records it finds in its --out: none may be there
        print(f"removing the earlier acceptance output in {out}", flush=True)
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="kbh-home-"))
    cache = home / "kbh-cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KBH_", "TRITON_", "TORCHINDUCTOR_"))}
    env.update(HOME=str(home), KBH_CACHE=str(cache), KBH_TEST_CACHE=str(cache), PYTHONUNBUFFERED="1",
               XDG_CACHE_HOME=str(home / ".cache"))
    py = sys.executable
    results: dict[str, tuple[bool, str]] = {}

    def left() -> float:
        return a.deadline - (time.monotonic() - start)

    def step(name: str, cmd: list[str], judge) -> None:
        if name in a.skip:
            return
        if left() < 20:
            results[name] = (False, "not run (deadline)")
            return
        rc, s = run(cmd, out / f"{name}.log", env, min(left(), CAP_S.get(name, left())))
        ok, detail = judge(rc)
        results[name] = (ok, f"{detail}, rc {rc}, {s:.0f} s")
        print(f"{name}: {'ok' if ok else 'FAIL'}: {results[name][1]}", flush=True)

    main_out, suite_out, tri = out / "main", out / "suite", out / "triton"

    def judge_main(rc: int) -> tuple[bool, str]:
        recs = records(main_out)
        fast = [r for r in recs if r["solution"] == "fast_vec16"]
        good = sum(r["status"] == "correct" and not integrity(r) for r in fast)
        faults = sum(r["status"] == "harness_error" for r in recs)
        return rc == 0 and len(recs) == 10 and good == 5 and not faults, (
            f"{len(recs)}/10 records, fast_vec16 {good}/5 correct and unflagged, {faults} harness_error")

    def judge_suite(folder: Path, want: int):
        def judge(rc: int) -> tuple[bool, str]:
            recs = [r for d in sorted(folder.iterdir()) if d.is_dir() for r in records(d)] if folder.is_dir() else []
            ok, detail = check_records(recs, want)
            return rc == 0 and ok, detail
        return judge

    step("main", [py, "run_eval.py", "configs/pack_tokens.yaml", "--out", str(main_out)], judge_main)
    step("reftime", [py, "bench/reftime.py", "--out", str(out / "reftime"), "--variants", a.reftime_variants],
         lambda rc: (rc == 0, "reference timings vs plain PyTorch: " + ("within 5%" if rc == 0 else "see reftime.log")))
    step("suite", [py, "run_eval.py", "--problems", "bench/acceptance/problems", "--solutions",
                   "bench/acceptance/solutions", "--suite", "bench/acceptance/suite.yaml", "--device", "cuda",
                   "--out", str(suite_out)],
         judge_suite(suite_out, len(list((REPO / "bench" / "acceptance" / "problems").glob("*.py")))))
    step("triton", [py, "bench/suite.py", "--passes", "1", "--no-compile", "--out", str(tri)],
         judge_suite(tri / "run1", 20))
    env["KBH_BUNDLED_RUN"] = str(main_out)
    step("tests", [py, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", *TESTS],
         lambda rc: (rc == 0, (out / "tests.log").read_text().strip().splitlines()[-1][:200]
                     if (out / "tests.log").exists() else ""))
    device = ""
    try:
        device = json.loads((main_out / "run.json").read_text())["devices"]["0"]["gpu"]
    except (OSError, ValueError, KeyError, TypeError):
        pass
    ok = all(v[0] for v in results.values()) and not [s for s in ("main", "suite", "reftime", "triton", "tests")
                                                      if s not in results and s not in a.skip]
    parts = "; ".join(f"{k} {'ok' if v[0] else 'FAIL'} ({v[1]})" for k, v in results.items())
    print(f"ACCEPTANCE {'PASS' if ok else 'FAIL'} on {device or 'unknown GPU'} in "
          f"{time.monotonic() - start:.0f} s: {parts}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

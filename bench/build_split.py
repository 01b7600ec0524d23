"""Where one cold build's time goes, and what torch/extension.h's precompiled header saves.

    python bench/build_split.py [--solution FILE] [--arch 9.0] [--concurrent N]

Builds the candidate into an empty cache as the harness does (`harness.build_worker`, two compiler jobs),
reads each compile's seconds from ninja's log, builds the precompiled header into a second empty cache
(`harness.extcache --pch`), then builds the candidate again with the header on CPATH. With --concurrent N
it also builds N copies (distinct names, so distinct cache entries) at once, without and with the header:
the batch case, where the CPU, not one build's longest compile, is what a build costs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, md_table, renamed


def ninja_steps(cache: Path) -> dict[str, float]:
    """Seconds per output (main.o, cuda.cuda.o, the .so) from every .ninja_log under the cache."""
    steps: dict[str, float] = {}
    for log in cache.rglob(".ninja_log"):
        for line in log.read_text().splitlines():
            parts = line.split("\t")
            if line.startswith("#") or len(parts) < 4:
                continue
            name = "link" if parts[3].endswith(".so") else parts[3]
            steps[name] = steps.get(name, 0.0) + (int(parts[1]) - int(parts[0])) / 1e3
    return steps


def build(cands: list[Path], cache: Path, env: dict) -> float:
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "harness.build_worker", str(c), str(cache / f"r{i}.json"),
                               str(cache)], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
             for i, c in enumerate(cands)]
    for p in procs:
        p.wait()
    wall = time.monotonic() - t0
    bad = [c.name for i, c in enumerate(cands) if '"built"' not in (cache / f"r{i}.json").read_text()]
    if bad:
        raise SystemExit(f"build failed: {bad}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--solution", default=str(REPO / "solutions" / "pack_tokens" / "fast_vec16.py"))
    ap.add_argument("--arch", default="9.0")
    ap.add_argument("--concurrent", type=int, default=0)
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from harness.build import toolchain_id

    base = Path(tempfile.mkdtemp(prefix="kbh-build-split-"))
    toolchain = toolchain_id("cuda")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", MAX_JOBS="2", TORCH_CUDA_ARCH_LIST=args.arch,
               KBH_TOOLCHAIN=toolchain, PYTHONPATH=str(REPO))
    env.pop("CPATH", None)
    src = Path(args.solution)
    rows = []
    one = renamed(src, base, "_c0")

    wall = build([one], base / "plain", env)
    rows.append(["one build, no header", f"{wall:.1f}", *fmt(ninja_steps(base / "plain"))])

    t0 = time.monotonic()
    pch = subprocess.run([sys.executable, "-m", "harness.extcache", "--pch", str(base / "pch"), toolchain], cwd=REPO,
                         env=env, capture_output=True, text=True)
    pch_s = time.monotonic() - t0
    folder = pch.stdout.strip().removeprefix("PCH").strip()
    print(f"precompiled header: {pch_s:.1f} s, folder {folder or '(none: ' + pch.stderr[-300:] + ')'}", flush=True)
    with_pch = dict(env, CPATH=folder) if folder else env

    wall = build([one], base / "pch", with_pch)
    rows.append(["one build, header on CPATH", f"{wall:.1f}", *fmt(ninja_steps(base / "pch"))])
    print(md_table(["case", "wall s", "main.o s", "cuda.o s", "link s", "compile CPU s"], rows), flush=True)

    if args.concurrent:
        many = [renamed(src, base, f"_c{k}") for k in range(1, args.concurrent + 1)]
        for label, e, cache in (("no header", env, base / "many_plain"), ("header on CPATH", with_pch, base / "many_pch")):
            wall = build(many, cache, e)
            rows.append([f"{args.concurrent} builds at once, {label}", f"{wall:.1f}", *fmt(ninja_steps(cache))])
            print(f"{label}: {args.concurrent} at once in {wall:.1f} s", flush=True)
        print(md_table(["case", "wall s", "main.o s", "cuda.o s", "link s", "compile s"],
                       rows))
    print("(a step's seconds are its wall time from ninja's log, summed over the builds of the row)")
    print(f"\nhost: {os.cpu_count()} CPUs; toolchain: {toolchain}")


def fmt(steps: dict[str, float]) -> list[str]:
    main_s, cu_s, link_s = steps.get("main.o", 0.0), steps.get("cuda.cuda.o", 0.0), steps.get("link", 0.0)
    return [f"{main_s:.1f}", f"{cu_s:.1f}", f"{link_s:.1f}", f"{main_s + cu_s:.1f}"]


if __name__ == "__main__":
    main()

"""Where a launch-bound figure's modes come from: reftime's launch-bound reference timed in one process under
several input layouts in turn, each trial on freshly allocated tensors behind a random pad, so a mode that
follows the process, the layout or the address shows as such. Clocks: `plain` (reftime's plain method) and
`harness` (the worker's CudaClock, launches behind the flush, its persisting-L2 reset).

    python bench/layouts.py [--processes 4] [--trials 24] [--calls 60]

Prints, per clock and layout, the trials' medians (min, quartiles, max, us) and the share of trials in the
slow mode (over that clock's fastest trial by more than --gap us), then per process its fastest trial and every
trial's median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO
from reftime import PROBLEMS

CHILD = r'''
import json, random, sys, torch
sys.path.insert(0, sys.argv[1])
from harness.problem import ProblemSource, build_model, load_namespace, make_inputs
from harness.worker import clocks
clock_kind, path, trials, calls, seed = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
if clock_kind == "harness":
    clocks.prefer_spin_wait()
torch.set_grad_enabled(False)
ns = load_namespace(ProblemSource("p", path, open(path).read()))
model = build_model(ns["Model"], ns, 1, "cuda")
l2 = torch.cuda.get_device_properties(0).L2_cache_size
flush_bytes = max(2 * l2, 256 * 2**20)
if clock_kind == "harness":
    clock = clocks.CudaClock(flush_bytes)
    def timed(fn):
        box = []
        us = clock.measure(lambda: box.append(fn()), lambda o: None, True, 0.0)[2].device_us
        return us, box[0]
else:
    flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
    def timed(fn):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) * 1e3, out
rng = random.Random(seed)
layouts = ["fixed", "rot16", "held16"]
for t in range(trials):
    layout = layouts[t % 3]
    pad = torch.empty(rng.randrange(0, 64) * 65536 + 512 * rng.randrange(0, 128), dtype=torch.uint8, device="cuda")
    sets = [make_inputs(ns, {}, 1000 * t + k, "cuda") for k in range(1 if layout == "fixed" else 16)]
    held, times, ptr_out = [], [], None
    for k in range(10 + calls):
        inputs = sets[k % len(sets)]
        us, out = timed(lambda: model(*inputs))
        ptr_out = ptr_out or out.data_ptr()
        if layout == "held16":
            held = (held + [out])[-16:]
        del out
        if k >= 10:
            times.append(us)
    x = sets[0][0]
    print(json.dumps({"trial": t, "layout": layout, "median_us": sorted(times)[len(times) // 2],
                      "x_ptr": x.data_ptr(), "out_ptr": ptr_out, "pad": pad.numel()}), flush=True)
    del sets, held, pad, x
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=4)
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--gap", type=float, default=0.5)
    ap.add_argument("--clocks", default="plain,harness")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="kbh-layouts-"))
    path = root / "launch_ops.py"
    path.write_text(PROBLEMS["launch_ops"])
    rows = []
    for p in range(a.processes):
        for clock in a.clocks.split(","):
            out = subprocess.run([sys.executable, "-c", CHILD, str(REPO), clock, str(path), str(a.trials),
                                  str(a.calls), str(p)], capture_output=True, text=True)
            if out.returncode:
                print(f"{clock} process {p}: {out.stderr.strip().splitlines()[-1:]}")
                continue
            got = [dict(json.loads(line), clock=clock, process=p) for line in out.stdout.split("\n") if line]
            print(f"{clock} process {p}: " + ", ".join(f"{r['layout']} {r['median_us']:.2f}" for r in got), flush=True)
            rows += got
    (root / "rows.json").write_text(json.dumps(rows))
    floor = {c: min(r["median_us"] for r in rows if r["clock"] == c) for c in {r["clock"] for r in rows}}
    for clock in a.clocks.split(","):
        for layout in ("fixed", "rot16", "held16"):
            m = sorted(r["median_us"] for r in rows if r["clock"] == clock and r["layout"] == layout)
            if not m:
                continue
            q = statistics.quantiles(m, n=4) if len(m) > 1 else [m[0]] * 3
            slow = sum(x > floor[clock] + a.gap for x in m) / len(m)
            print(f"{clock:8s} {layout:7s} n={len(m):3d} min {m[0]:.2f} q1 {q[0]:.2f} med {q[1]:.2f} q3 {q[2]:.2f} "
                  f"max {m[-1]:.2f} us; slow (> {floor[clock] + a.gap:.2f}) {slow:.0%}")
        for p in range(a.processes):
            m = [r for r in rows if r["clock"] == clock and r["process"] == p]
            if m:
                print(f"  {clock} process {p}: fastest trial {min(r['median_us'] for r in m):.2f} us, trials "
                      f"{[round(r['median_us'], 1) for r in m]}")
    print(f"rows: {root / 'rows.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

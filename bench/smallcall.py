"""What a small problem's plain figure (warm-up by time, L2 flush, CUDA events, median) depends on, in one
process after another:
- layouts: where its tensors lie in device memory. Each layout is a pad allocation of a random size made before
  the inputs are drawn; layouts are measured in two interleaved passes, so a layout's own figure is told apart
  from the device's drift.
- gaps: how long the device idles between calls (the host waits, after each call's sync, that long), and the
  same gaps with the device kept busy through them by a spin kernel (`busy`).
- parts: the plain method, interleaved call by call with its variants: the persisting-L2 reset before the
  flush (unsynced, or synced before the events), four reused events, and the harness's clock behind the flush;
  then a plain block before and after 200 resets alone.
- clocks: the plain method against the harness's own CudaClock (behind the flush, with a 300 us hold, and
  synchronized after the flush), in the same process on the same inputs, twice.
And the process itself: started as the harness starts workers or plainly (--modes).

    python bench/smallcall.py [--problem launch_ops] [--layouts 8] [--runs 100] [--modes plain,fork+spin]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO
from reftime import PROBLEMS

ONE = r'''
import json, os, random, sys, time, torch
sys.path.insert(0, sys.argv[1])
from harness.problem import ProblemSource, build_model, load_namespace, make_inputs
from harness.worker.clocks import CudaClock, prefer_spin_wait
path, layouts, runs, seed, mode = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
if "fork" in mode and os.fork():
    sys.exit(os.waitstatus_to_exitcode(os.wait()[1]))
if "onecore" in mode:
    os.sched_setaffinity(0, [max(os.sched_getaffinity(0))])
if "spin" in mode:
    prefer_spin_wait()
ns = load_namespace(ProblemSource("p", path, open(path).read()))
torch.set_grad_enabled(False)
model = build_model(ns["Model"], ns, 1, "cuda")
flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
clock = CudaClock(256 * 2**20)
rng = random.Random(seed)
pads, sets = [], []
for k in range(layouts):
    pads.append(torch.empty(rng.randrange(0, 2**20, 512) + 512, dtype=torch.uint8, device="cuda"))
    sets.append(make_inputs(ns, {}, 1, "cuda"))
def med(inputs, n, gap_us=0, busy=False, how="plain", cover=0.0):
    t = []
    for _ in range(n):
        if how == "plain":
            flush.zero_()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); out = model(*inputs); b.record(); torch.cuda.synchronize()
            t.append(a.elapsed_time(b) * 1e3)
        else:
            t.append(clock.measure(lambda: model(*inputs), lambda o: None, how == "behind", cover)[2].device_us)
        if busy and gap_us:
            torch.cuda._sleep(int(gap_us * 1500))
        end = time.perf_counter() + gap_us / 1e6
        while time.perf_counter() < end:
            pass
    t.sort()
    return round(t[len(t) // 2], 2)
t0 = time.monotonic()
while time.monotonic() - t0 < 0.1:
    med(sets[0], 10)
layout = {"pass1": [med(s, runs) for s in sets], "pass2": [med(s, runs) for s in sets]}
gaps = {f"{g}{'busy' if b else ''}": med(sets[0], runs, g, b) for g in (0, 100, 300, 1000, 3000)
        for b in ((False, True) if g else (False,))}
clocks = {f"{how}{cover or ''}/{k}": med(sets[0], runs, how=how, cover=cover) for k in (1, 2)
          for how, cover in (("plain", 0), ("behind", 0), ("behind", 300.0), ("synced", 0))}
reset = clock._cudart.cudaCtxResetPersistingL2Cache if clock._cudart is not None else (lambda: None)
ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
def part(name, x):
    if name == "clock":
        return clock.measure(lambda: model(*x), lambda o: None, True, 0.0)[2].device_us
    if name == "reset_before_sync":
        reset(); torch.cuda.synchronize()
    if name == "reset_in":
        reset()
    flush.zero_()
    if name == "events4":
        ev[0].record(); flush.zero_(); ev[1].record(); model(*x); ev[2].record(); ev[3].record()
        torch.cuda.synchronize()
        return ev[1].elapsed_time(ev[2]) * 1e3
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record(); model(*x); b.record(); torch.cuda.synchronize()
    return a.elapsed_time(b) * 1e3
names = ("plain", "reset_in", "reset_before_sync", "events4", "clock")
got = {n: [] for n in names}
for _ in range(runs):
    for n in names:
        got[n].append(part(n, sets[0]))
parts = {n: round(sorted(v)[len(v) // 2], 2) for n, v in got.items()}
blocks = {"before": med(sets[0], runs)}
for _ in range(200):
    reset(); torch.cuda.synchronize()
blocks["after_resets"] = med(sets[0], runs)
for _ in range(200):
    flush.zero_(); model(*sets[0])
torch.cuda.synchronize()
blocks["after_plain_calls"] = med(sets[0], runs)
print(json.dumps({"mode": mode, "layouts": layout, "gaps_us": gaps, "clocks": clocks, "parts": parts,
                  "blocks": blocks}))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="launch_ops", choices=sorted(PROBLEMS))
    ap.add_argument("--layouts", type=int, default=8)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--modes", default="plain,fork+onecore+spin,plain,fork+onecore+spin",
                    help="one process each: plain, fork (a child of a process that imported torch, as the fork "
                    "server's workers are), onecore, spin (spin-waiting syncs), joined with +")
    a = ap.parse_args()
    path = Path(tempfile.mkdtemp(prefix="kbh-layout-")) / f"{a.problem}.py"
    path.write_text(PROBLEMS[a.problem])
    for p, mode in enumerate(a.modes.split(",")):
        out = subprocess.run([sys.executable, "-c", ONE, str(REPO), str(path), str(a.layouts), str(a.runs), str(p),
                              mode], capture_output=True, text=True)
        print(f"process {p}: " + (out.stdout.strip() or out.stderr.strip()[-400:]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whether one action changes a small problem's plain figure for the rest of the process: in a fresh process
each, three plain blocks (warm-up by time, L2 flush, CUDA events, median), the action, three plain blocks.
Actions: none, the persisting-L2 limit set to 0 or read, one persisting-L2 reset, the harness's CudaClock
(built and used behind the flush, with its reset or without one), one spin kernel.

    python bench/l2step.py [--problem launch_ops] [--runs 100]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import REPO
from reftime import PROBLEMS

ACTIONS = ("none", "setlimit0", "getlimit", "reset", "clock", "clock_noreset", "spin")

ONE = r'''
import ctypes, json, sys, time, torch
sys.path.insert(0, sys.argv[1])
import harness.worker.clocks as C
from harness.problem import ProblemSource, build_model, load_namespace, make_inputs
path, runs, action = sys.argv[2], int(sys.argv[3]), sys.argv[4]
ns = load_namespace(ProblemSource("p", path, open(path).read()))
torch.set_grad_enabled(False)
model = build_model(ns["Model"], ns, 1, "cuda")
flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
x = make_inputs(ns, {}, 1, "cuda")
def med(n):
    t = []
    for _ in range(n):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); model(*x); b.record(); torch.cuda.synchronize()
        t.append(a.elapsed_time(b) * 1e3)
    return round(sorted(t)[n // 2], 2)
t0 = time.monotonic()
while time.monotonic() - t0 < 0.1:
    med(10)
before = [med(runs) for _ in range(3)]
rt = C.find_cudart()
if action == "setlimit0":
    rt.cudaDeviceSetLimit(C.CUDA_LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
elif action == "getlimit":
    v = ctypes.c_size_t(0); rt.cudaDeviceGetLimit(ctypes.byref(v), C.CUDA_LIMIT_PERSISTING_L2)
elif action == "reset":
    rt.cudaCtxResetPersistingL2Cache()
elif action.startswith("clock"):
    if action == "clock_noreset":
        C.find_cudart = lambda: None
    clock = C.CudaClock(256 * 2**20)
    for _ in range(runs):
        clock.measure(lambda: model(*x), lambda o: None, True, 0.0)
elif action == "spin":
    torch.cuda._sleep(100000)
torch.cuda.synchronize()
after = [med(runs) for _ in range(3)]
print(json.dumps({"action": action, "before": before, "after": after}))
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="launch_ops", choices=sorted(PROBLEMS))
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--actions", default=",".join(ACTIONS))
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    path = Path(tempfile.mkdtemp(prefix="kbh-step-")) / f"{a.problem}.py"
    path.write_text(PROBLEMS[a.problem])
    for _ in range(a.repeat):
        for action in a.actions.split(","):
            out = subprocess.run([sys.executable, "-c", ONE, str(REPO), str(path), str(a.runs), action],
                                 capture_output=True, text=True)
            print(out.stdout.strip() or out.stderr.strip()[-400:], flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

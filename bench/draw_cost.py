"""What drawing one input set costs: the problem's `get_inputs` as the harness calls it (seeded, on the
device), wall time per draw, kernels per draw and host syncs per draw, for each problem file given.

    python bench/draw_cost.py [--problems problems/pack_tokens.py bench/baselines/pack_tokens_v1.py]
                              [--shapes seed wide mixtral] [--n 200] [--device cuda] [--no-fill]

`--no-fill` adds, for each problem, the same draw without torch's fill of uninitialized memory (the
harness draws in deterministic mode, where torch fills every new tensor by default).

The harness draws a fresh set for every timed call, so this is a floor under a timed call's wall time
(bench/feed_cost.py splits the rest). Draws alternate between the problem files, so a drift of the host
lands on each alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=[str(REPO / "problems" / "pack_tokens.py"),
                                                        str(REPO / "bench" / "baselines" / "pack_tokens_v1.py")])
    ap.add_argument("--shapes", nargs="+", default=["seed", "wide", "mixtral", "deepseek"])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-fill", action="store_true", help="also time each draw without the fill")
    args = ap.parse_args()

    import torch

    from harness.config import load_config
    from harness.problem import load_namespace, make_inputs, read_problem

    cfg = load_config(REPO / "configs" / "pack_tokens.yaml")
    spaces = {}
    for p in args.problems:
        name = Path(p).name if Path(p).parent.name != "baselines" else f"baselines/{Path(p).name}"
        ns = load_namespace(read_problem(Path(p)))
        spaces[name] = (ns, True)
        if args.no_fill:
            spaces[f"{name}, no fill"] = (ns, False)
    cuda = args.device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def kernels_and_syncs(ns, fill, params) -> tuple[int, int]:
        if not cuda:
            return 0, 0
        from torch.profiler import ProfilerActivity, profile

        sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            make_inputs(ns, params, 11, args.device, fill_uninitialized=fill)
            sync()
        kernels = sum(1 for e in prof.events() if e.device_type.name == "CUDA")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                make_inputs(ns, params, 12, args.device, fill_uninitialized=fill)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        sync()
        return kernels, sum("synchroniz" in str(w.message) for w in caught)

    print(f"ms per draw (wall, {args.n} draws each, alternating, synced after each draw), device {args.device}"
          + (f" ({torch.cuda.get_device_name(0)})" if cuda else "") + "\n")
    print("| shape | problem | median ms | mean ms | GPU kernels | host syncs |")
    print("|---|---|---:|---:|---:|---:|")
    for shape_name in args.shapes:
        params = dict(next(s for s in cfg.shapes if s.name == shape_name).params)
        times: dict[str, list[float]] = {k: [] for k in spaces}
        for _ in range(5):
            for ns, fill in spaces.values():
                make_inputs(ns, params, 1, args.device, fill_uninitialized=fill)
        sync()
        for i in range(args.n):
            for name, (ns, fill) in spaces.items():
                t0 = time.perf_counter()
                make_inputs(ns, params, 1000 + i, args.device, fill_uninitialized=fill)
                sync()
                times[name].append(1e3 * (time.perf_counter() - t0))
        for name, (ns, fill) in spaces.items():
            k, s = kernels_and_syncs(ns, fill, params)
            print(f"| {shape_name} | {name} | {statistics.median(times[name]):.3f} | "
                  f"{statistics.mean(times[name]):.3f} | {k} | {s} |", flush=True)


if __name__ == "__main__":
    main()

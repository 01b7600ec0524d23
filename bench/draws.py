"""A problem's draw, as the harness makes it (`make_inputs`: seeded, on the device, torch's deterministic mode).

    python bench/draws.py cost [--problems problems/pack_tokens.py ...] [--shapes seed wide] [--n 200] [--filled]
    python bench/draws.py repeat [--problems ...] [--shapes deepseek] [--seeds 40] [--n 50]

`cost`: wall ms, GPU kernels and host syncs per draw. The harness draws a fresh set for every timed call, so
this is a floor under a timed call's wall time; draws alternate between the problem files, so a drift of the
host lands on each alike. `--filled` adds each draw with torch's fill of new tensors on (the harness draws without
it, and draws each check seed both ways to find memory a draw never wrote).
`repeat`: whether each seed's draw repeats bit for bit, drawn once and again `--n` times. The judge and the
candidate's worker draw each seed apart and compare fingerprints, so a draw that differs rejects an honest
candidate (`input_mutated`, `timed_output_mismatch`).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from pathlib import Path

from _common import REPO, md_table, shape_params


def cost(spaces: dict, shapes: list[str], n: int, device: str) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from harness.problem import make_inputs

    cuda = device == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def kernels_and_syncs(ns, fill, params) -> tuple[int, int]:
        if not cuda:
            return 0, 0
        sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            make_inputs(ns, params, 11, device, fill_uninitialized=fill)
            sync()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                make_inputs(ns, params, 12, device, fill_uninitialized=fill)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        sync()
        return sum(e.device_type.name == "CUDA" for e in prof.events()), sum("synchroniz" in str(w.message) for w in caught)

    rows = []
    for shape in shapes:
        params = shape_params(shape)
        times: dict[str, list[float]] = {k: [] for k in spaces}
        for i in range(-5, n):
            for name, (ns, fill) in spaces.items():
                t0 = time.perf_counter()
                make_inputs(ns, params, 1000 + i, device, fill_uninitialized=fill)
                sync()
                if i >= 0:
                    times[name].append(1e3 * (time.perf_counter() - t0))
        for name, (ns, fill) in spaces.items():
            rows.append([shape, name, f"{statistics.median(times[name]):.3f}", f"{statistics.mean(times[name]):.3f}",
                         *kernels_and_syncs(ns, fill, params)])
    print(f"ms per draw (wall, {n} draws each, alternating, synced after each), device {device}\n")
    print(md_table(["shape", "problem", "median ms", "mean ms", "GPU kernels", "host syncs"], rows))


def repeat(spaces: dict, shapes: list[str], seeds: int, n: int, device: str) -> None:
    import torch

    from harness.problem import make_inputs

    def same(a, b) -> bool:
        return all(torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)) for x, y in zip(a, b))

    rows = []
    for shape in shapes:
        params = shape_params(shape)
        for name, (ns, fill) in spaces.items():
            bad = [seed for seed in range(7000, 7000 + seeds)
                   for first in [make_inputs(ns, params, seed, device, fill_uninitialized=fill)]
                   for _ in range(n) if not same(first, make_inputs(ns, params, seed, device, fill_uninitialized=fill))]
            rows.append([shape, name, seeds * n, len(bad), ", ".join(map(str, sorted(set(bad))[:5])) or "-"])
    print(f"{seeds} seeds, each drawn once and again {n} times, on {device}, torch {torch.__version__}\n")
    print(md_table(["shape", "problem", "repeats", "differing", "seeds with a difference"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("cost", "repeat"))
    ap.add_argument("--problems", nargs="+", default=[str(REPO / "problems" / "pack_tokens.py")])
    ap.add_argument("--shapes", nargs="+", default=None)
    ap.add_argument("--n", type=int, default=None, help="draws per shape (cost: 200) or repeats per seed (repeat: 50)")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--filled", action="store_true", help="cost: also each draw with torch's fill of new tensors")
    args = ap.parse_args()

    from harness.problem import load_namespace, read_problem

    spaces = {}
    for p in args.problems:
        ns = load_namespace(read_problem(Path(p)))
        spaces[Path(p).name] = (ns, False)
        if args.filled and args.what == "cost":
            spaces[f"{Path(p).name}, filled"] = (ns, True)
    if args.what == "cost":
        cost(spaces, args.shapes or ["seed", "wide", "mixtral", "deepseek"], args.n or 200, args.device)
    else:
        repeat(spaces, args.shapes or ["deepseek"], args.seeds, args.n or 50, args.device)


if __name__ == "__main__":
    main()

"""Pack-tokens kernels against a copy of the same bytes, in one process, two ways: `busy` (the GPU always
has the next call queued: device time, host latency hidden) and `idle` (flush, sync, events around the
call: what the harness's clock sees, without its refills and verification between calls).

    python bench/kernel_time.py CANDIDATE.py [...] [--shapes wide mixtral deepseek seed] [--n 100]

Candidates are imported with the build cache (.cache/kbh); build them first in parallel with
`run_eval.py ... --build-only`. Each is checked once against the reference on every shape (exact).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness import problem  # noqa: E402
from harness.build_worker import import_on_this_gpu  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.timing import prefer_spin_wait  # noqa: E402
from harness.worker import _CopyModel, _EmptyModel  # noqa: E402


def times(fn, n: int, flush: torch.Tensor, busy: bool) -> tuple[float, float]:
    """Median us of n calls by CUDA events, and the median host time of the call itself (until it returns),
    L2 flushed before each; busy: no sync between calls."""
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    host = []
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    for e0, e1 in ev:
        flush.zero_()
        if not busy:
            torch.cuda.synchronize()
        e0.record()
        h0 = time.perf_counter_ns()
        out = fn()
        host.append((time.perf_counter_ns() - h0) / 1e3)
        e1.record()
        del out
        if not busy:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(e0.elapsed_time(e1) * 1e3 for e0, e1 in ev), statistics.median(host)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("candidates", nargs="+")
    ap.add_argument("--config", default=str(REPO / "configs" / "pack_tokens.yaml"))
    ap.add_argument("--shapes", nargs="+", default=["wide", "mixtral", "deepseek", "seed"])
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--cache", default=str(REPO / ".cache" / "kbh"))
    args = ap.parse_args()
    print(f"host wait: {prefer_spin_wait()}")
    cfg = load_config(args.config)
    ns = problem.load_namespace(problem.read_problem(Path(cfg.problem)))
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    mods = {}
    for c in args.candidates:
        try:
            mods[Path(c).stem] = import_on_this_gpu(c, args.cache).ModelNew()
        except Exception as e:  # noqa: BLE001 - a broken variant is reported, the others still run
            print(f"{Path(c).stem}: import failed: {type(e).__name__}: {str(e)[:200]}")
    ref = ns["Model"]()
    print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}; median us of {args.n} calls, "
          "CUDA events, 256 MB flush before each\n")
    empty = _EmptyModel()
    one = torch.zeros(1, device="cuda")
    (eb, _), (ei, eh) = times(lambda: empty(one), args.n, flush, True), times(lambda: empty(one), args.n, flush, False)
    print(f"empty launch through an nn.Module (the harness's floor): busy {eb:.1f} us, idle {ei:.1f} us, "
          f"host {eh:.1f} us\n")
    print("| shape | kernel | busy us | idle us | idle host us | busy / copy busy | idle / copy idle | exact |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name in args.shapes:
        shape_rows(ns, ref, mods, next(s for s in cfg.shapes if s.name == name), args.n, flush)
        torch.cuda.empty_cache()


def shape_rows(ns: dict, ref, mods: dict, shape, n: int, flush: torch.Tensor) -> None:
    one = torch.zeros(1, device="cuda")
    inputs = problem.make_inputs(ns, dict(shape.params), 1234, "cuda")
    want = ref(*inputs)
    nbytes = sum(x.numel() * x.element_size() for x in inputs) + want.numel() * want.element_size()
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()

    def copy():
        return torch.empty_like(src).copy_(src)

    (cb, _), (ci, ch) = times(copy, n, flush, True), times(copy, n, flush, False)
    print(f"| {shape.name} | copy of {nbytes / 1e6:.1f} MB | {cb:.1f} | {ci:.1f} | {ch:.1f} | 1.00 | 1.00 | |",
          flush=True)
    floor = _CopyModel(nbytes, "cuda")
    (fb, _), (fi, fh) = times(lambda: floor(one), n, flush, True), times(lambda: floor(one), n, flush, False)
    print(f"| {shape.name} | the same copy through an nn.Module (the harness's copy floor) | {fb:.1f} | {fi:.1f} | "
          f"{fh:.1f} | {fb / cb:.2f} | {fi / ci:.2f} | |", flush=True)
    for label, m in mods.items():
        try:
            got = m(*inputs)
            exact = got.shape == want.shape and bool(torch.equal(got, want))
            b, _ = times(lambda m=m: m(*inputs), n, flush, True)
            i, h = times(lambda m=m: m(*inputs), n, flush, False)
            print(f"| {shape.name} | {label} | {b:.1f} | {i:.1f} | {h:.1f} | {b / cb:.2f} | {i / ci:.2f} | {exact} |",
                  flush=True)
        except Exception as e:  # noqa: BLE001 - one failing variant is reported, the others still run
            print(f"| {shape.name} | {label} | failed: {type(e).__name__}: {str(e)[:120]} | | | | | |", flush=True)

if __name__ == "__main__":
    main()

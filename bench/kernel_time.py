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


def times(fn, n: int, flush: torch.Tensor, busy: bool) -> tuple[list[float], list[float]]:
    """n calls' us by CUDA events, and the host time of each call itself (until it returns), L2 flushed
    before each; busy: no sync between calls."""
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
    return [e0.elapsed_time(e1) * 1e3 for e0, e1 in ev], host


def interleaved(entries: dict, n: int, rounds: int, flush: torch.Tensor) -> dict[str, tuple[float, float, float]]:
    """Median busy us, idle us and idle host us of each entry, its n calls spread over rounds taken in turn
    with the others', so that a slow phase of the host falls on every entry alike."""
    got = {k: ([], [], []) for k in entries}
    per = max(1, n // rounds)
    for _ in range(rounds):
        for label, fn in entries.items():
            busy, _ = times(fn, per, flush, True)
            idle, host = times(fn, per, flush, False)
            got[label][0].extend(busy)
            got[label][1].extend(idle)
            got[label][2].extend(host)
    return {k: tuple(statistics.median(x) for x in v) for k, v in got.items()}


def identity_routing(inputs: list) -> list:
    """The same tokens routed to one expert in token order: the kernel's output is then a copy of
    token_hidden, its writes as sequential as a copy's."""
    x = inputs[0]
    n = x.shape[0]
    e = torch.zeros(n, dtype=torch.int32, device=x.device)
    s = torch.arange(n, dtype=torch.int32, device=x.device)
    off = torch.full((inputs[3].numel(),), n, dtype=torch.int32, device=x.device)
    off[0] = 0
    return [x, e, s, off]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("candidates", nargs="+")
    ap.add_argument("--config", default=str(REPO / "configs" / "pack_tokens.yaml"))
    ap.add_argument("--shapes", nargs="+", default=["wide", "mixtral", "deepseek", "seed"])
    ap.add_argument("--n", type=int, default=100, help="calls of each kind per entry")
    ap.add_argument("--rounds", type=int, default=5, help="rounds the calls are spread over, entries in turn")
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
    print(f"GPU {torch.cuda.get_device_name(0)}, torch {torch.__version__}; median us of {args.n} calls of each "
          f"kind in {args.rounds} rounds, entries in turn; CUDA events, 256 MB flush before each\n")
    empty = _EmptyModel()
    one = torch.zeros(1, device="cuda")
    eb, ei, eh = interleaved({"empty": lambda: empty(one)}, args.n, 1, flush)["empty"]
    print(f"empty launch through an nn.Module (the harness's floor): busy {eb:.1f} us, idle {ei:.1f} us, "
          f"host {eh:.1f} us\n")
    print("| shape | kernel | busy us | idle us | idle host us | busy / copy busy | idle / copy idle | exact |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name in args.shapes:
        shape_rows(ns, ref, mods, next(s for s in cfg.shapes if s.name == name), args.n, args.rounds, flush)
        torch.cuda.empty_cache()


def shape_rows(ns: dict, ref, mods: dict, shape, n: int, rounds: int, flush: torch.Tensor) -> None:
    one = torch.zeros(1, device="cuda")
    inputs = problem.make_inputs(ns, dict(shape.params), 1234, "cuda")
    want = ref(*inputs)
    nbytes = sum(x.numel() * x.element_size() for x in inputs) + want.numel() * want.element_size()
    src = torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda").random_()
    floor = _CopyModel(nbytes, "cuda")
    copy_label = f"copy of {nbytes / 1e6:.1f} MB"
    entries = {copy_label: lambda: torch.empty_like(src).copy_(src),
               "the same copy through an nn.Module (the harness's copy floor)": lambda: floor(one)}
    exact = {}
    for i, (label, m) in enumerate(mods.items()):
        try:
            got = m(*inputs)
            exact[label] = got.shape == want.shape and bool(torch.equal(got, want))
            entries[label] = lambda m=m: m(*inputs)
            if i == 0:
                same = identity_routing(inputs)
                exact[f"{label}, identity routing"] = bool(torch.equal(m(*same), same[0]))
                entries[f"{label}, identity routing"] = lambda m=m, same=same: m(*same)
        except Exception as e:  # noqa: BLE001 - one failing variant is reported, the others still run
            print(f"| {shape.name} | {label} | failed: {type(e).__name__}: {str(e)[:120]} | | | | | |", flush=True)
    res = interleaved(entries, n, rounds, flush)
    cb, ci, _ = res[copy_label]
    for label, (b, i, h) in res.items():
        print(f"| {shape.name} | {label} | {b:.1f} | {i:.1f} | {h:.1f} | {b / cb:.2f} | {i / ci:.2f} | "
              f"{exact.get(label, '')} |", flush=True)


if __name__ == "__main__":
    main()

"""Whether a problem's draw repeats bit for bit on this device: each seed drawn once, then again `--n`
times, every tensor compared byte for byte, both as the harness draws (`make_inputs`: torch's
deterministic mode) and as it drew until the sixteenth session (seeded, no mode).

    python bench/draw_repeat.py [--problems problems/pack_tokens.py bench/baselines/pack_tokens_float_cumsum.py]
                                [--shapes deepseek] [--seeds 40] [--n 50] [--device cuda]

The judge and the candidate's worker draw each seed apart and compare fingerprints, so a draw that
differs rejects an honest candidate (`input_mutated`, `timed_output_mismatch`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=[str(REPO / "problems" / "pack_tokens.py"),
                                                        str(REPO / "bench" / "baselines" / "pack_tokens_float_cumsum.py")])
    ap.add_argument("--shapes", nargs="+", default=["deepseek"])
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()

    import torch

    from harness.config import load_config
    from harness.problem import load_namespace, make_inputs, read_problem, seed_everything

    def plain(ns, params, seed):
        seed_everything(seed, args.device)
        return ns["get_inputs"](**params, device=args.device)

    def harness(ns, params, seed):
        return make_inputs(ns, params, seed, args.device)

    def same(a, b) -> bool:
        return all(torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8))
                   for x, y in zip(a, b))

    cfg = load_config(REPO / "configs" / "pack_tokens.yaml")
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"{args.seeds} seeds, each drawn once and again {args.n} times, on {args.device} ({name}), "
          f"torch {torch.__version__}\n")
    print("| shape | problem | draw | repeats | differing | seeds with a difference |")
    print("|---|---|---|---:|---:|---|")
    for shape_name in args.shapes:
        params = dict(next(s for s in cfg.shapes if s.name == shape_name).params)
        for path in args.problems:
            ns = load_namespace(read_problem(Path(path)))
            for label, draw in (("harness (deterministic mode)", harness), ("seeded, no mode", plain)):
                bad, seeds = 0, []
                for seed in range(args.seeds):
                    first = draw(ns, params, 7000 + seed)
                    for _ in range(args.n):
                        if not same(first, draw(ns, params, 7000 + seed)):
                            bad += 1
                            if 7000 + seed not in seeds:
                                seeds.append(7000 + seed)
                print(f"| {shape_name} | {Path(path).name} | {label} | {args.seeds * args.n} | {bad} | "
                      f"{', '.join(map(str, seeds[:5])) or '-'} |", flush=True)


if __name__ == "__main__":
    main()

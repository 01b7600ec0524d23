"""Generate honest variants of the fast pack-tokens kernel, one candidate file each.

The grid (block size x vector width x vectors per thread) gives the 16 distinct candidates of bench/throughput.py;
the ablations (row count read first, whole output zero-filled first, contract checked in Python, plain
stores, a persistent grid, other unroll and block sizes) are the measured alternatives in the solution's
design note (bench/kernel_time.py, bench/roofline.py).

    python bench/variants.py OUT_DIR [--grid] [--ablations [NAME ...]]
"""

from __future__ import annotations

import argparse
import itertools
import re
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "solutions" / "pack_tokens" / "fast_vec16.py"
GRID = {"THREADS": (128, 256), "MAX_VEC": (8, 16), "FLAT_ITEMS": (1, 2, 4, 8)}
ABLATIONS = {"sync_read_first": {"SYNC_READ_FIRST": 1}, "zero_fill_first": {"ZERO_FILL_FIRST": 1},
             "check_in_python": {"CHECK_IN_PYTHON": 1}, "plain_stores": {"STREAM_STORES": 0},
             "count_by_copy": {"COUNT_BY_KERNEL": 0}, "threads_128": {"THREADS": 128}, "items_4": {"FLAT_ITEMS": 4},
             "threads_128_items_4": {"THREADS": 128, "FLAT_ITEMS": 4},
             # the fifteenth session's one launch: chunks drawn from a counter, on a grid of resident blocks or not
             "two_launches": {"TICKETS": 0}, "tickets_grid_32": {"PERSISTENT": 0},
             "min_blocks_4": {"MIN_BLOCKS": 4},
             # the sixteenth session: output rows pulled in order from their token instead of token rows pushed
             "gather": {"GATHER": 1},
             # padding rows zeroed by the whole block, in chunks of 256 or 64 output rows
             "zero_spread": {"ZERO_SPREAD": 1}, "zero_spread_64": {"ZERO_SPREAD": 1, "ZERO_ROWS": 64},
             # the fifth session's fused grid (owner map first, padding rows zeroed beside the scatter)
             "unfused": {"TICKETS": 0, "FUSED": 0}, "no_pdl": {"TICKETS": 0, "PDL": 0},
             "blocks_3": {"TICKETS": 0, "BLOCKS_PER_SM": 3}, "blocks_8": {"TICKETS": 0, "BLOCKS_PER_SM": 8},
             # the row-group kernel (FLAT 0), the default before the fourth session, and its own alternatives
             "rows": {"FLAT": 0}, "rows_threads_128": {"FLAT": 0, "THREADS": 128},
             "rows_persistent_grid": {"FLAT": 0, "BLOCKS_PER_SM": 8}, "rows_unroll_4": {"FLAT": 0, "UNROLL": 4},
             "rows_unroll_8": {"FLAT": 0, "UNROLL": 8}, "rows_threads_512": {"FLAT": 0, "THREADS": 512},
             "rows_no_prefetch": {"FLAT": 0, "PREFETCH_NEXT": 0}}


def render(settings: dict[str, int]) -> str:
    text = SOURCE.read_text()
    for key, value in settings.items():
        text, n = re.subn(rf"^{key} = \d+", f"{key} = {value}", text, count=1, flags=re.MULTILINE)
        if n != 1:
            raise ValueError(f"{SOURCE} has no constant {key}")
    return text


def grid_variants() -> dict[str, dict[str, int]]:
    out = {}
    for t, v, u in itertools.product(*GRID.values()):
        out[f"fast_t{t}_v{v}_i{u}"] = {"THREADS": t, "MAX_VEC": v, "FLAT_ITEMS": u}
    return out


def write(out_dir: Path, variants: dict[str, dict[str, int]]) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, settings in variants.items():
        p = out_dir / f"{name}.py"
        p.write_text(render(settings))
        paths.append(p)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--grid", action="store_true", help="the 16 block x vector x items variants")
    ap.add_argument("--ablations", nargs="*", default=None, metavar="NAME",
                    help="the design-note ablations (all, or those named)")
    args = ap.parse_args()
    variants = {}
    if args.grid:
        variants.update(grid_variants())
    if args.ablations is not None:
        unknown = sorted(set(args.ablations) - set(ABLATIONS))
        if unknown:
            ap.error(f"unknown ablation {unknown[0]!r}; known: {', '.join(ABLATIONS)}")
        variants.update({f"fast_{k}": v for k, v in ABLATIONS.items() if not args.ablations or k in args.ablations})
    for p in write(args.out_dir, variants):
        print(p)


if __name__ == "__main__":
    main()

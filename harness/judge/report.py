"""Reports: the terminal table, summary.csv, summary.md and summary.json, from the run's records."""

import json
from pathlib import Path

import pandas as pd
from rich.console import Console
from rich.table import Table

from ..stats import fast_p, geomean
from .records import Record, TimingFigures
from .verdict import UNRANKED, Status

FAST_P = (0.0, 0.5, 1.0, 1.5, 2.0)
TIMING_COLUMNS = ("time_us", "runs", "iqr_us", "gpu_time_us", "ref_time_us", "ref_compile_time_us",
                  "bandwidth_gbps", "bandwidth_frac", "copy_ratio")
STATUS_STYLE = {"correct": "green", "incorrect": "red", "rejected": "bold red", "compile_error": "yellow",
                "runtime_error": "yellow", "timeout": "magenta", "harness_error": "bold magenta"}


def _fmt(x: float | None, spec: str, unit: str = "") -> str:
    return "-" if x is None else format(x, spec) + unit


def _speedup(d: dict, unit: str = "x") -> str:
    """A speedup whose 95% interval holds 1 reads as ~1x: it is not shown to be faster or slower; an unstable
    one has no point figure, only its interval."""
    lo, hi = d["speedup_lo"], d["speedup_hi"]
    if "unstable" in d["flags"].split():
        return "?"
    return f"~1{unit}" if lo is not None and lo <= 1 <= hi else _fmt(d["speedup"], ".2f", unit)


def _interval(d: dict) -> str:
    return "-" if d["speedup_lo"] is None else f"[{d['speedup_lo']:.2f}, {d['speedup_hi']:.2f}]"


def lower(r: Record) -> float | None:
    """The speedup's lower 95% bound; the speedup itself where it has no interval."""
    return r.speedup_ci[0] if r.speedup_ci else r.speedup


def rows(records: list[Record]) -> list[dict]:
    return [{"solution": r.solution, "shape": r.shape, "status": r.status, "speedup": r.speedup,
             "speedup_lo": r.speedup_ci[0] if r.speedup_ci else None,
             "speedup_hi": r.speedup_ci[1] if r.speedup_ci else None, "speedup_compile": r.speedup_compile,
             **{k: getattr(r.timing or TimingFigures(), k) for k in TIMING_COLUMNS},
             "max_abs_err": r.check.max_abs_err, "flags": " ".join(r.flags), "message": r.message}
            for r in records]


def ranked(r: Record) -> bool:
    """Correct, and not left out of rankings by the verdict (verdict.UNRANKED)."""
    return r.status == Status.CORRECT and not UNRANKED & set(r.flags)


def summary(records: list[Record]) -> dict:
    """Geometric means per solution, and fast_p over solutions and over records, each counted only where the
    lower 95% bound clears p (for a solution, the geometric mean of its shapes' lower bounds). Records the
    verdict leaves unranked (a check too weak to tell an answer from a constant, an unstable speedup) count in
    neither."""
    sols = {}
    for name in dict.fromkeys(r.solution for r in records):
        rs = [r for r in records if r.solution == name]
        ok = [r for r in rs if r.status == Status.CORRECT]
        top = [r for r in ok if ranked(r)]
        sols[name] = {"shapes": len(rs), "correct": len(ok), "ranked": len(top),
                      "geomean_speedup": geomean(r.speedup for r in top),
                      "geomean_speedup_lo": geomean(lower(r) for r in top),
                      "geomean_speedup_compile": geomean(r.speedup_compile for r in top),
                      "all_correct": len(ok) == len(rs)}
    per_solution = [s["geomean_speedup_lo"] if s["all_correct"] else None for s in sols.values()]
    per_record = [lower(r) if ranked(r) else None for r in records]
    return {"solutions": sols, "fast_p": {f"{p:g}": fast_p(per_solution, p) for p in FAST_P},
            "fast_p_records": {f"{p:g}": fast_p(per_record, p) for p in FAST_P}}


def caption(device: str, device_name: str, metric: str, quantile: float) -> str:
    how = ("CUDA events around each call, L2 flushed before each" if device == "cuda"
           else "monotonic host clock around each call, caches flushed before each")
    return (f"time_us: median of 'runs' timed calls, microseconds, {how}; device: {device_name}. "
            f"speedup ({metric}): where speedup_rounds is set, the reference eager calls' {quantile:g} "
            "quantile (timing.speedup_quantile) over the candidate's, every call of each side pooled over "
            "the rounds timed in turn (record diagnostics.rounds has each round); else reference median / "
            "candidate median; vs compile: torch.compile reference. 95% CI: Student t over the rounds' own "
            "ratios (without rounds, from the medians' standard errors); a speedup whose interval holds 1 reads "
            "~1x, and fast_p counts lower bounds. x copy: the candidate over a copy of the same bytes timed the "
            "same way (floors.copy_us), by rounds too.")


FOOTNOTE = ("speedup: reference time / candidate time [95% CI], ~1x where the interval holds 1; time_us: median "
            "per call, caches flushed; every column and whole messages: summary.md")


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 1] + "…"


def print_table(records: list[Record], console: Console, title: str) -> None:
    """Fits 120 columns: the wider figures (runs, errors, bandwidth, whole messages) are in summary.md."""
    table = Table(title=title, show_lines=False)
    for col in ("solution", "shape", "status", "speedup [95% CI]", "vs compile", "time_us", "flags / message"):
        left = col in ("solution", "shape", "status", "flags / message")
        table.add_column(col, justify="left" if left else "right", overflow="fold")
    for d in rows(records):
        extra = f"{d['flags']} {_short(d['message']) if d['status'] != 'correct' else ''}".strip()
        ci = "" if d["speedup_lo"] is None else f" [{d['speedup_lo']:.2f}, {d['speedup_hi']:.2f}]"
        table.add_row(d["solution"], d["shape"], f"[{STATUS_STYLE.get(d['status'], '')}]{d['status']}[/]",
                      _speedup(d) + ci, _fmt(d["speedup_compile"], ".2f", "x"), _fmt(d["time_us"], ".1f"), extra)
    s = summary(records)
    for name, sol in s["solutions"].items():
        table.add_row(f"[bold]{name}[/]", "[bold]geomean[/]", f"{sol['correct']}/{sol['shapes']} correct",
                      f"{_fmt(sol['geomean_speedup'], '.2f', 'x')} [> {_fmt(sol['geomean_speedup_lo'], '.2f')}]",
                      _fmt(sol["geomean_speedup_compile"], ".2f", "x"), "", "")
    console.print(table)
    fp = "  ".join(f"fast_{p}={v:.2f}" for p, v in s["fast_p"].items())
    console.print(f"fast_p (all shapes correct, geomean of lower bounds > p): {fp}")


def write_files(records: list[Record], out_dir: Path, note: str) -> None:
    data, s = rows(records), summary(records)
    pd.DataFrame(data, columns=list(data[0]) if data else ["solution", "shape", "status"]).to_csv(
        out_dir / "summary.csv", index=False)
    (out_dir / "summary.json").write_text(json.dumps(s, indent=2))
    lines = [f"_{note}_", "", "| solution | shape | status | speedup | 95% CI | vs compile | time_us | runs | GB/s | "
             "x copy | max_abs_err | flags |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for d in data:
        cells = [d["solution"], d["shape"], d["status"], _speedup(d, ""), _interval(d),
                 _fmt(d["speedup_compile"], ".2f"), _fmt(d["time_us"], ".1f"), d["runs"] or "-",
                 _fmt(d["bandwidth_gbps"], ".3g"), _fmt(d["copy_ratio"], ".2f"),
                 _fmt(d["max_abs_err"], ".3g"), d["flags"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines += ["", "| solution | correct shapes | geomean speedup | geomean of lower bounds | geomean vs compile |",
              "|---|---:|---:|---:|---:|"]
    for name, sol in s["solutions"].items():
        lines.append(f"| {name} | {sol['correct']}/{sol['shapes']} | {_fmt(sol['geomean_speedup'], '.2f')} | "
                     f"{_fmt(sol['geomean_speedup_lo'], '.2f')} | {_fmt(sol['geomean_speedup_compile'], '.2f')} |")
    fp = ", ".join(f"fast_{p} = {v:.2f}" for p, v in s["fast_p"].items())
    lines += ["", f"fast_p over solutions (geomean of lower 95% bounds > p): {fp}"]
    failing = [f"- {d['solution']} / {d['shape']}: {d['status']}: {d['message']}" for d in data
               if d["status"] != Status.CORRECT and d["message"]]
    lines += ["", "Messages:", "", *failing] if failing else []
    (out_dir / "summary.md").write_text("\n".join(lines) + "\n")

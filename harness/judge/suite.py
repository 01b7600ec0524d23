"""Suites: many KernelBench-format problems in one run, each problem's candidates in a folder named after its
file. One judge process, one fork server and one build cache serve the problems in turn; each problem's records
and tables go to OUT/<problem>/ as a single run's do, and the suite's tables (a row per problem x candidate, then
per level and overall) to OUT/suite.md, suite.csv and suite.json. Running again with the same --out continues."""

import glob
import json
import secrets
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd
from rich.console import Console

from ..errors import UsageError
from ..stats import geomean
from .config import config_from, load_config, read_yaml
from .options import RunOptions
from .plan import work_root
from .records import Record
from .report import FAST_P, lower, ranked
from .verdict import Status

SECTIONS = ("shapes", "cpu_shapes", "check", "timing", "build", "timeouts", "static_checks")


def find_problems(spec: str) -> list[Path]:
    """Problem files: every *.py under a folder, or what a glob names; their stems must differ (candidates are
    found by them)."""
    p = Path(spec)
    found = p.rglob("*.py") if p.is_dir() else (Path(x) for x in glob.glob(spec, recursive=True))
    files = sorted(f.resolve() for f in found if f.suffix == ".py" and f.is_file() and f.name != "__init__.py")
    if not files:
        raise UsageError(f"--problems {spec}: no problem files (*.py) there")
    twice = [s for s, n in Counter(f.stem for f in files).items() if n > 1]
    if twice:
        raise UsageError(f"--problems {spec}: two problem files named {twice[0]}.py (candidates are found by name)")
    return files


def suite_settings(path: str | None, stems: set[str]) -> dict:
    """The suite file's `defaults` and `problems` mappings, checked for unknown keys and problems."""
    if path is None:
        return {}
    data = read_yaml(path) or {}
    if not isinstance(data, dict) or set(data) - {"defaults", "problems"}:
        raise UsageError(f"{path}: expected a mapping with keys defaults and problems")
    for key, section in [("defaults", data.get("defaults"))] + list((data.get("problems") or {}).items()):
        where = key if key == "defaults" else f"problems.{key}"
        if key != "defaults" and key not in stems:
            raise UsageError(f"{path}: {where}: no such problem in --problems")
        if section is not None and (not isinstance(section, dict) or set(section) - set(SECTIONS)):
            raise UsageError(f"{path}: {where}: expected a mapping of {', '.join(SECTIONS)}")
    return data


def problem_config(problem: Path, suite: dict, suite_path: str | None):
    """A problem's run config: the suite's defaults, then its own entry, section by section."""
    if not suite:
        return load_config(problem)
    own = (suite.get("problems") or {}).get(problem.stem) or {}
    merged: dict = {}
    for section in SECTIONS:
        base, mine = (suite.get("defaults") or {}).get(section), own.get(section)
        merged[section] = {**base, **mine} if isinstance(base, dict) and isinstance(mine, dict) else (
            mine if mine is not None else base)
    return config_from({k: v for k, v in merged.items() if v is not None} | {"problem": str(problem)},
                       Path(suite_path))


def run_suite(args: RunOptions, console: Console, repo_root: Path, make_plan) -> list[Record]:
    """Each problem through make_plan (the command line's) and a Runner, or with --cluster over every lane of
    the cluster, one problem after another; a problem that cannot run is named in the tables and the suite
    goes on."""
    from .runner import Runner

    if args.cluster and args.reference_only:
        raise UsageError("--cluster: --reference-only runs on one host")
    lanes = None  # a cluster's lane actors, kept from one problem to the next
    if args.cluster:
        from .cluster import LanePool, run_cluster

        lanes = LanePool()

        def run(plan) -> list[Record]:
            return run_cluster(plan, console, repo_root, args.cluster, pool=lanes)
    else:
        def run(plan) -> list[Record]:
            return Runner(plan, console, repo_root).run()
    if not args.reference_only and (args.solutions is None or not Path(args.solutions).is_dir()):
        raise UsageError(f"--solutions {args.solutions}: expected the candidates' folder (one subfolder a problem)")
    if args.solution or args.resume:
        raise UsageError("a suite takes its candidates from --solutions and continues with the same --out")
    problems = find_problems(args.problems)
    suite = suite_settings(args.suite, {p.stem for p in problems})
    out = Path(args.out) if args.out else work_root() / "results" / f"{time.strftime('%Y%m%d-%H%M%S')}-suite-" \
        f"{secrets.token_hex(2)}"
    records: list[Record] = []
    skipped: dict[str, str] = {}
    found = {p: [] if args.reference_only else sorted((Path(args.solutions) / p.stem).glob("*.py")) for p in problems}
    if not (args.reference_only or args.cluster):  # a cluster's lanes build where they run
        prebuild(args, found, suite, console, repo_root, make_plan)
    try:
        for problem, cands in found.items():
            if not cands and not args.reference_only:
                skipped[problem.stem] = f"no candidates in {Path(args.solutions) / problem.stem}"
                continue
            sub = replace(args, config=str(problem), solution=tuple(str(c) for c in cands), out=str(out / problem.stem),
                          baseline_out=str(out / "baseline.json"))
            try:
                plan = make_plan(sub, console, problem_config(problem, suite, args.suite))
                console.print(f"[bold]{problem.stem}[/]: {len(plan.solutions)} candidate(s) x {len(plan.shapes)} "
                              f"shape(s), output {plan.out_dir}")
                records += run(plan)
            except (UsageError, RuntimeError) as e:
                skipped[problem.stem] = str(e)
                console.print(f"[red]{problem.stem}: not run: {e}[/]")
    finally:
        if lanes is not None:
            lanes.release()
    if not args.reference_only:
        write_suite(records, skipped, out, console)
    return records


def prebuild(args: RunOptions, found: dict[Path, list[Path]], suite: dict, console: Console,
             repo_root: Path, make_plan) -> None:
    """Every problem's candidates built into the cache at once, in one build pool, before the first is
    evaluated: a suite's cold builds then take about as long as the longest, not their sum (a CUDA build is
    about 25 s on the H100 host). Only a head start: each problem's run looks its builds up as usual and makes
    any that is missing."""
    from .runner import Runner

    problems = list(found)
    named = [(f"{problem.stem}.{c.stem}", c) for problem, cands in found.items() for c in cands]
    if len(problems) < 2 or not named:
        return
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kbh-prebuild-") as tmp:
        sub = replace(args, config=str(problems[0]), solution=tuple(str(c) for _, c in named), out=tmp,
                      build_only=True, shapes=None)
        try:
            plan = make_plan(sub, Console(quiet=True), problem_config(problems[0], suite, args.suite))
            Runner(replace(plan, solutions=tuple(named)), Console(quiet=True), repo_root).run()
        except Exception as e:  # noqa: BLE001  (a head start only: each problem's run builds what it needs)
            console.print(f"[yellow]suite builds: not made ahead: {type(e).__name__}: {e}[/]")
            return
    console.print(f"suite builds: {len(named)} candidate(s) of {len(problems)} problem(s) built or found in the "
                  f"cache in {time.monotonic() - t0:.0f} s")


def suite_rows(records: list[Record]) -> list[dict]:
    """One row per problem x candidate: correct on every shape, ranked where every shape is (report.ranked),
    geometric means over its shapes."""
    keys = list(dict.fromkeys((r.problem, r.solution) for r in records))
    rows = []
    for prob, sol in keys:
        rs = [r for r in records if (r.problem, r.solution) == (prob, sol)]
        ok = all(r.status == Status.CORRECT for r in rs)
        rank = ok and all(ranked(r) for r in rs)
        rows.append({"problem": prob, "level": rs[0].level, "solution": sol, "correct": ok, "ranked": rank,
                     "status": Status.CORRECT if ok else next(r.status for r in rs if r.status != Status.CORRECT),
                     "speedup": geomean(r.speedup for r in rs) if rank else None,
                     "speedup_lo": geomean(lower(r) for r in rs) if rank else None,
                     "speedup_compile": geomean(r.speedup_compile for r in rs) if rank else None})
    return rows


def aggregate(rows: list[dict]) -> dict:
    """Per level and overall: how many, the correct rate, the geometric mean speedup over the correct, and fast_p
    counted on lower 95% bounds."""
    groups = {f"level {lv}": [r for r in rows if r["level"] == lv]
              for lv in sorted({r["level"] for r in rows if r["level"]})}
    groups["overall"] = rows
    return {name: {"rows": len(rs), "correct_rate": sum(r["correct"] for r in rs) / len(rs),
                   "geomean_speedup": geomean(r["speedup"] for r in rs),
                   "fast_p": {f"{p:g}": sum(1 for r in rs if r["ranked"] and (r["speedup_lo"] or 0) > p) / len(rs)
                              for p in FAST_P}}
            for name, rs in groups.items() if rs}


def write_suite(records: list[Record], skipped: dict[str, str], out: Path, console: Console) -> None:
    rows = suite_rows(records)
    agg = aggregate(rows)
    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows, columns=list(rows[0]) if rows else ["problem", "solution"]).to_csv(out / "suite.csv",
                                                                                          index=False)
    (out / "suite.json").write_text(json.dumps({"rows": rows, "groups": agg, "not_run": skipped}, indent=2))

    def fmt(x, spec=".2f"):
        return "-" if x is None else format(x, spec)

    lines = ["| problem | level | solution | status | speedup (geomean over shapes) | lower 95% bound | vs compile |",
             "|---|---|---|---|---:|---:|---:|"]
    lines += [f"| {r['problem']} | {r['level'] or '-'} | {r['solution']} | {r['status']} | {fmt(r['speedup'])} | "
              f"{fmt(r['speedup_lo'])} | {fmt(r['speedup_compile'])} |" for r in rows]
    lines += ["", "| group | problem x candidate | correct | geomean speedup | "
              + " | ".join(f"fast_{p:g}" for p in FAST_P) + " |", "|---|---:|---:|---:|" + "---:|" * len(FAST_P)]
    lines += [f"| {name} | {g['rows']} | {100 * g['correct_rate']:.0f}% | {fmt(g['geomean_speedup'])} | "
              + " | ".join(f"{v:.2f}" for v in g["fast_p"].values()) + " |" for name, g in agg.items()]
    lines += ["", "fast_p counts a problem x candidate correct on every shape whose geometric mean of lower 95% "
              "bounds is over p."] + [f"- {k}: not run: {v}" for k, v in skipped.items()]
    (out / "suite.md").write_text("\n".join(lines) + "\n")
    console.print("\n".join(lines))
    console.print(f"suite results: {out}")

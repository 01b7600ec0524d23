"""Command line: parse, resolve the plan, run; exit 0 (ran), 1 (--strict, not all correct), 2 (bad input), 3 (a
record is harness_error: a fault of the harness's own)."""

import argparse
import json
import os
import secrets
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

from rich.console import Console

from .. import sandbox
from ..errors import UsageError
from ..problem import read_problem, validate
from ..seeds import MAX_SEED, fresh_master_seed
from ..settings import Config
from . import baseline, forkserver, isolation, report, stopping
from .builds import default_jobs
from .config import load_config
from .options import RunOptions, parse
from .plan import Plan, expand_solutions, name_solutions, parse_lanes, select_shapes, work_root
from .records import read_records
from .verdict import Status

REPO_ROOT = Path(__file__).resolve().parents[2]  # the checkout, or site-packages once installed


def _cuda_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def make_plan(args: RunOptions, console: Console, config: Config | None = None) -> Plan:
    config = config or load_config(args.config)
    if args.precision:
        config = replace(config, check=replace(config.check, precision=args.precision))
    notes = []
    device = args.device
    if device is None:
        device = "cuda" if _cuda_visible() else "cpu"
        if device == "cpu":
            notes.append("no GPU visible: running on the CPU (--device cpu)")
            console.print(f"[yellow]{notes[-1]}[/]")
    elif device == "cuda" and not _cuda_visible():
        raise UsageError("--device cuda: no CUDA device is visible")
    src = read_problem(config.problem)
    wanted = args.shapes
    if not wanted and device == "cpu" and config.cpu_shapes:
        wanted = list(config.cpu_shapes)
        notes.append(f"CPU run: the config's cpu_shapes ({', '.join(wanted)})")
    shapes = select_shapes(config.shapes, wanted)
    validate(src, shapes)
    paths = expand_solutions(args.solution) if args.solution else list(config.solutions.get(device, ()))
    if args.reference_only:
        paths = []
    elif not paths:
        raise UsageError(f"{args.config}: solutions.{device}: no solutions listed; pass --solution FILE")
    for option, value in (("--seeds", args.seeds), ("--jobs", args.jobs)):
        if value is not None and value < 1:
            raise UsageError(f"{option} {value}: expected at least 1")
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        raise UsageError(f"--seed {args.seed}: expected 0 to {MAX_SEED}")
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{src.name}-{secrets.token_hex(2)}"
    master, given = (args.seed, True) if args.seed is not None else (fresh_master_seed(), False)
    salt = secrets.token_hex(16)
    out_dir = Path(args.out) if args.out else work_root() / "results" / run_id
    if args.resume:
        out_dir = Path(args.resume)
        run_json = out_dir / "run.json"
        if not run_json.is_file():
            raise UsageError(f"--resume {args.resume}: no run.json in that folder")
        try:
            prev = json.loads(run_json.read_text())
            seeds = prev["seeds"]
            run_id = prev.get("run_id", run_id)
            if "master" in seeds:
                master, given, salt = int(seeds["master"]), bool(seeds.get("given")), seeds.get("salt", salt)
            else:
                notes.append("the earlier pass's seeds were never written (its judge was killed): the rest of the "
                             "run draws fresh ones")
        except (ValueError, KeyError, TypeError):
            raise UsageError(f"--resume {args.resume}: run.json is not readable") from None
        if args.seed is not None and args.seed != master:
            raise UsageError(f"--seed {args.seed}: the run in {args.resume} used seed {master}")
        notes.append(f"resumed {args.resume}")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"--out {out_dir}: cannot create it: {e.strerror or e}") from None
    kept = len(read_records(out_dir / "results.jsonl"))
    if kept and not args.resume:
        notes.append(f"kept {kept} record(s) already in {out_dir / 'results.jsonl'}: those candidates and shapes "
                     "are not evaluated again (another --out evaluates them afresh)")
        console.print(f"[yellow]{notes[-1]}[/]")
    default_cache = os.environ.get("KBH_CACHE", work_root() / ".cache" / "kbh")
    cache_dir = Path(args.cache).resolve() if args.cache else Path(default_cache)
    if args.isolate:
        isolation.check_available(REPO_ROOT, {"the build cache": cache_dir, "the output folder": out_dir}, device)
    return Plan(config=config, problem=src, device=device, shapes=shapes, solutions=name_solutions(paths),
                master_seed=master, seed_given=given, seed_salt=salt, seeds=args.seeds or config.check.seeds,
                static_policy=args.static_checks or config.static_checks,
                lanes=parse_lanes(args.gpus, device), jobs=args.jobs or config.build.jobs or default_jobs(),
                out_dir=out_dir.resolve(), cache_dir=cache_dir, run_id=run_id, notes=tuple(notes),
                build_only=args.build_only, isolate=args.isolate, profile=args.profile,
                reference_only=args.reference_only, baseline=baseline.load(args.baseline, device) if args.baseline
                else None, baseline_out=Path(args.baseline_out or out_dir / "baseline.json"))


def resume_command(args: RunOptions) -> RunOptions:
    """`--resume DIR` alone: the run's own command from its run.json; flags given again take precedence."""
    try:
        command = json.loads((Path(args.resume) / "run.json").read_text())["command"]
    except (OSError, ValueError, KeyError, TypeError):
        command = None
    if not isinstance(command, dict) or not command.get("config"):
        raise UsageError(f"--resume {args.resume}: no run.json there that names its command (give the CONFIG "
                         "again; a suite continues with the same --problems, --solutions and --out)")
    given = RunOptions.from_namespace(argparse.Namespace(**command))
    return replace(args, **{f.name: getattr(given, f.name) for f in fields(RunOptions)
                            if f.name in command and getattr(args, f.name) is None})


HARNESS_ERROR_EXIT = 3


def exit_code(records, strict: bool) -> int:
    """3 when a record is harness_error (the harness failed, not the candidate), else 1 with --strict when a
    record is not correct, else 0."""
    if any(r.status == Status.HARNESS_ERROR for r in records):
        sys.stderr.write("run_eval.py: a fault of the harness's own left records with status harness_error "
                         "(tracebacks in the candidates' logs)\n")
        return HARNESS_ERROR_EXIT
    return 1 if strict and any(r.status != Status.CORRECT for r in records) else 0


def main(argv: list[str] | None = None) -> int:
    """Workers and builds are forks of one fork server, started first so its imports overlap the judge's;
    --isolate and --build-only runs (whose builds start at once, not after its imports) start fresh ones."""
    try:
        args = parse(argv)
    except UsageError as e:
        sys.stderr.write(f"run_eval.py: error: {e}\n")
        return 2
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    out = [args.resume or args.out]  # the run's folder, once known: where an interrupted run's records are
    with stopping.Interrupts():
        try:
            if not (args.build_only or args.isolate or args.cluster):
                forkserver.start(REPO_ROOT)
            return _run(args, console, out)
        except KeyboardInterrupt:
            where = f" in {out[0]}" if out[0] else " in its results folder"
            sys.stderr.write(f"run_eval.py: interrupted; finished records are kept{where} (--resume DIR "
                             "continues)\n")
            stopping.kill_all()
            forkserver.stop()
            stopping.leave(stopping.EXIT)
        finally:
            forkserver.stop()


def _run(args: RunOptions, console: Console, out: list) -> int:
    try:
        if args.resume and args.config is None and args.problems is None:
            args = resume_command(args)
        if (args.config is None) == (args.problems is None):
            raise UsageError("give a CONFIG or --problems DIR|GLOB (a suite), not both")
        if args.problems is not None:
            from .suite import run_suite

            records = run_suite(args, console, REPO_ROOT, make_plan)
            console.print(f"[dim]{report.FOOTNOTE}[/]")
            return exit_code(records, args.strict)
        if args.solutions or args.suite:
            raise UsageError("--solutions and --suite go with --problems (for one problem: --solution FILE)")
        plan = make_plan(args, console)
    except UsageError as e:
        sys.stderr.write(f"run_eval.py: error: {e}\n")
        return 2
    from .runner import Runner

    abi = sandbox.abi_version()
    console.print(f"run {plan.run_id}: {len(plan.solutions)} solution(s) x {len(plan.shapes)} shape(s) on "
                  f"{plan.device}, seeds committed ({plan.seed_commitment[:12]}), output {plan.out_dir}; "
                  "write sandbox: "
                  + (f"Landlock ABI {abi}" if abi else "[yellow]none (no Landlock on this kernel: the guard restores "
                     "changes instead)[/]"))
    out[0] = str(plan.out_dir)
    try:
        if args.cluster:
            from .cluster import run_cluster

            records = run_cluster(plan, console, REPO_ROOT, args.cluster)
        else:
            records = Runner(plan, console, REPO_ROOT).run()
    except UsageError as e:
        sys.stderr.write(f"run_eval.py: error: {e}\n")
        return 2
    except RuntimeError as e:
        sys.stderr.write(f"run_eval.py: error: {e}\n")
        return 1
    if records:
        console.print(f"[dim]{report.FOOTNOTE}[/]")
    console.print(f"results: {plan.out_dir} (master seed {plan.master_seed})")
    return exit_code(records, args.strict)

"""The Python entry point, for loops that evaluate candidates held in memory: the command line's plan, run and
records, in the caller's process, with no subprocess per call and no output folder to parse."""

import re
import tempfile
import threading
from dataclasses import replace
from pathlib import Path

from rich.console import Console

from ..errors import UsageError
from . import forkserver
from .cli import REPO_ROOT, make_plan
from .options import RunOptions


def _as_file(item: str | Path, folder: Path, stem: str) -> Path:
    """A path stays a path; text (anything with a line break) is written to a file of its own."""
    if isinstance(item, Path) or "\n" not in item:
        return Path(item)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.py"
    path.write_text(item)
    return path


def _outside(value, folder: str):
    """The record with every path into the call's temporary folder (gone once it returns) made None."""
    if isinstance(value, dict):
        return {k: _outside(v, folder) for k, v in value.items()}
    if isinstance(value, list):
        return [_outside(v, folder) for v in value]
    return None if isinstance(value, str) and value.startswith(folder) else value


class Evaluator:
    """Evaluations one at a time in this process. Between calls it keeps the fork server (the parent of workers
    and builds, torch already imported), the build cache and the reference timings it made, as a baseline of
    its own (harness.judge.baseline: per problem source, shape, precision, on this machine), so a loop does
    not pay their start or torch.compile each call; with `cluster`, it keeps its lane actors (each a GPU with
    its fork server) between calls too; fresh seeds and the reference's outputs are drawn and computed each
    call. close(), or leaving a with block, stops every process and actor it started."""

    def __init__(self, *, device: str | None = None, quiet: bool = True, **options):
        self.defaults = RunOptions.from_keywords(dict(options, device=device))
        self.console = Console(quiet=quiet, highlight=False)
        self._lock = threading.Lock()
        self._known: dict = {}  # baseline entries of the references this Evaluator timed
        self._lanes = None  # with cluster=: its lane actors, kept between calls (cluster.LanePool)

    def evaluate(self, problem: str | Path, candidates, **options) -> list[dict]:
        """Records of each candidate at each shape, in that order, as results.jsonl holds them. `problem` is a YAML
        run config, a KernelBench problem file or its text; `candidates` a list of paths or source texts, or a
        mapping of names to either. Bad input, options included, raises harness.errors.UsageError with the
        command line's one-line message. Without `out`, the run's folder is temporary and records name no file
        in it (log, times_file: None)."""
        given = RunOptions.from_keywords(options)
        opts = replace(self.defaults, **{k: getattr(given, k) for k in options})
        with self._lock, tempfile.TemporaryDirectory(prefix="kbh-api-") as tmp:
            src = Path(tmp) / "src"
            named = list(candidates.items() if isinstance(candidates, dict) else (
                (f"candidate_{i}", c) for i, c in enumerate([candidates] if isinstance(candidates, str) else candidates)))
            for name, _ in named:
                if not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", str(name)):
                    raise UsageError(f"candidate name {name!r}: expected letters, digits, '_', '.' and '-'")
            args = replace(opts, out=str(opts.out or Path(tmp) / "out"),
                           config=str(_as_file(problem, src / "problem", "problem")),
                           solution=tuple(str(_as_file(c, src / "candidates", name)) for name, c in named))
            server = forkserver.current()
            if not (args.isolate or args.cluster) and (server is None or server.status not in ("starting", "ready")):
                forkserver.start(REPO_ROOT)
            plan = make_plan(args, self.console)
            if isinstance(candidates, dict) and len(plan.solutions) == len(named):  # the caller's names
                plan = replace(plan, solutions=tuple((n, p) for (n, _), (_, p) in zip(named, plan.solutions)))
            if args.cluster:
                from .cluster import LanePool, run_cluster

                self._lanes = self._lanes or LanePool()
                done = run_cluster(plan, self.console, REPO_ROOT, args.cluster, pool=self._lanes)
            else:
                from .runner import Runner

                plan = replace(plan, baseline={**self._known, **(plan.baseline or {})})
                runner = Runner(plan, self.console, REPO_ROOT)
                done = runner.run()
                self._known.update(runner.baseline_entries())
            order = {key: i for i, key in enumerate((n, s.name) for n, _ in plan.solutions for s in plan.shapes)}
            records = [_outside(r.to_json(), tmp) for r in done]  # in the order they finished
            return sorted(records, key=lambda r: order.get((r["solution"], r["shape"]), len(order)))

    def close(self) -> None:
        if self._lanes is not None:
            self._lanes.release()
        forkserver.stop()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def evaluate(problem: str | Path, candidates, *, device: str | None = None, **options) -> list[dict]:
    """One evaluation with an Evaluator of its own, stopped before it returns."""
    with Evaluator(device=device, **options) as ev:
        return ev.evaluate(problem, candidates)

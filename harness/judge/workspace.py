"""A run's places, each built whole in its constructor. `RunFolder`, the output folder, serves the local and
the cluster backends alike: the records already there (--resume), the writer, run.json, the tables. `Workspace`
adds what a run that starts candidate processes on this host needs: its scratch and JIT folders, the guard of
the repo and the results, the tamper watch and the write sandbox."""

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from ..sandbox import OWN
from . import isolation, report
from .guard import SCRATCH_PREFIX, TamperWatch, TreeGuard, write_sandbox
from .plan import Plan
from .records import Record, RecordWriter, read_records, write_run_json

SHM_MIN_FREE = 8 * 2**30


class RunFolder:
    def __init__(self, plan: Plan, on_record: Callable[[Record], None] | None = None):
        self.plan, self.out = plan, plan.out_dir
        self.logs = self.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        existing = read_records(self.out / "results.jsonl")
        self.done = {(r.solution, r.shape) for r in existing}
        self.writer = RecordWriter(self.out / "results.jsonl", existing, on_record)

    def todo(self, name: str) -> list:
        """The plan's shapes that `name` has no record of yet."""
        return [s for s in self.plan.shapes if (name, s.name) not in self.done]

    def write_run_json(self, final: bool, **backend) -> None:
        """run.json: what any run says of itself, then what its backend adds; the seeds only once final."""
        plan = self.plan
        write_run_json(self.out, {
            "run_id": plan.run_id, "problem": plan.problem.path, "device": plan.device,
            "config": plan.config.to_json(), "seeds": plan.seeds_json(reveal=final), "command": plan.command_json(),
            "static_checks": plan.static_policy, "cache_dir": str(plan.cache_dir), "notes": list(plan.notes),
            **backend, "complete": final})

    def reveal_seeds(self) -> None:
        """An unfinished run's run.json gets its seeds too, once no candidate process is left to read them."""
        path = self.out / "run.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if "master" not in data.get("seeds", {}):
            data["seeds"] = self.plan.seeds_json()
            write_run_json(self.out, data)

    def report(self, console: Console, device_name: str) -> list[Record]:
        """The tables of every record the folder holds, written and printed; returns those records."""
        plan, records = self.plan, self.writer.records
        timing = plan.config.timing
        report.write_files(records, self.out, report.caption(plan.device, device_name, timing.speedup_metric,
                                                             timing.speedup_quantile))
        report.print_table(records, console, f"{plan.problem.name}: {len(records)} records")
        return records


class Workspace:
    """scratch: in /dev/shm where it has room, the folders of the processes that run candidate code (`OWN`) in
    it; jit_home: their JIT caches, on a disk that may run code; src: the candidates' private copies, which the
    guard holds as the judge's own (TreeGuard.protect)."""

    def __init__(self, plan: Plan, repo_root: Path, folder: RunFolder):
        shm = os.access("/dev/shm", os.W_OK) and shutil.disk_usage("/dev/shm").free >= SHM_MIN_FREE
        self.scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir="/dev/shm" if shm else None))
        (self.scratch / OWN).mkdir()
        (self.scratch / "tmp").mkdir()
        self.src = self.scratch / "src"
        self.src.mkdir()
        self.jit_home = Path(tempfile.mkdtemp(prefix="kbh-jit-"))
        self.guard = TreeGuard(repo_root, folder.out, folder.writer, extra_roots=(self.src,))
        homes = (isolation.homes_root(),) if plan.isolate else ()
        self.sandbox, self.sandbox_status = write_sandbox(repo_root, folder.out, plan.cache_dir, self.scratch,
                                                          self.jit_home, *homes, strict=plan.strict_sandbox)
        self.tamper = TamperWatch(self.guard)

    def close(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)
        shutil.rmtree(self.jit_home, ignore_errors=True)

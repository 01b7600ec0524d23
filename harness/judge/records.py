"""Records, one JSON line per solution x shape: the verdict at the top level; nested, `check` (errors against
the reference), `timing` (both sides' figures), `floors` (the cheapest call and a copy, timed alike),
`diagnostics` (the paired rounds behind the speedup) and, with --profile, `profile` (where the wall time went).
Appended, flushed and fsynced as each is decided, so an interrupted run keeps them and `--resume` skips them."""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

SCHEMA_VERSION = 1
"""A record's layout, in each record (`schema_version`): raised when a key changes meaning or goes away."""


@dataclass(frozen=True)
class CheckFigures:
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    first_mismatch: list[int] | None = None
    seed: int | None = None  # the failing seed


@dataclass(frozen=True)
class TimingFigures:
    time_us: float | None = None  # median of the timed calls
    runs: int | None = None
    iqr_us: float | None = None
    min_us: float | None = None
    rse: float | None = None
    gpu_time_us: float | None = None  # CUDA-graph replay
    judge_us: float | None = None  # per verified call on the judge's own clock (round trip less a no-op's)
    judge_noise_us: float | None = None  # how far the two workers' no-op round trips disagree
    verified_calls: int | None = None  # timed calls whose answers the judge checked (judge's clock not counted)
    ref_time_us: float | None = None
    ref_compile_time_us: float | None = None
    ref_gpu_time_us: float | None = None
    speedup_rounds: int | None = None
    copy_ratio: float | None = None
    bytes_min: int | None = None
    bandwidth_gbps: float | None = None
    bandwidth_frac: float | None = None


@dataclass(frozen=True)
class Floors:
    launch_us: float | None = None
    read_us: float | None = None
    copy_us: float | None = None
    hidden_us: float | None = None  # host work a call may do behind the flush (the device's hold), unseen by events


@dataclass(frozen=True)
class Diagnostics:
    rounds: list[dict] = field(default_factory=list)  # each round's medians
    times_file: str | None = None  # every timed call of every round, under the run's times/
    judge_clock: dict | None = None  # the fastest round trips behind timing.judge_us, per worker (us)


@dataclass(frozen=True)
class Record:
    solution: str
    problem: str
    shape: str
    status: str
    level: str | None = None  # the KernelBench level the problem's path names
    flags: list[str] = field(default_factory=list)
    message: str = ""
    speedup: float | None = None
    speedup_compile: float | None = None
    speedup_ci: list[float] | None = None  # 95% interval of speedup (stats.ratio_interval)
    speedup_compile_ci: list[float] | None = None
    check: CheckFigures = CheckFigures()
    timing: TimingFigures | None = None
    floors: Floors | None = None
    diagnostics: Diagnostics | None = None
    device: str = ""
    node: str | None = None  # the host of a cluster run's lane (harness.judge.cluster); null on one host
    lane: int = 0
    solution_path: str = ""
    log: str = ""
    profile: dict | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> dict:
        """Non-finite figures (a relative error against a zero reference) become null; no profile, no key."""
        d = _finite(asdict(self))
        if d["profile"] is None:
            del d["profile"]
        return d

    @classmethod
    def from_json(cls, d: dict) -> Record:
        nested = dict(check=CheckFigures, timing=TimingFigures, floors=Floors, diagnostics=Diagnostics)
        kw = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for k, sub in nested.items():
            if isinstance(kw.get(k), dict):
                kw[k] = sub(**{f.name: kw[k][f.name] for f in fields(sub) if f.name in kw[k]})
        return cls(**kw)


def _finite(x):
    if isinstance(x, float):
        return round(x, 6) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    return [_finite(v) for v in x] if isinstance(x, list) else x


STOPPING = threading.Event()
"""Set at the first Ctrl-C (judge.stopping)."""


def write_run_json(out_dir: Path, data: dict) -> None:
    """run.json written whole or not at all (a reader, --resume among them, never sees half of it)."""
    tmp = out_dir / "run.json.tmp"
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(out_dir / "run.json")


def safe_name(name: str) -> str:
    """A solution name as a file name (logs)."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


class RecordWriter:
    """Appends records to results.jsonl; keeps the exact text it wrote, to detect and undo tampering."""

    def __init__(self, path: Path, existing: list[Record] | None = None,
                 on_write: Callable[[Record], None] | None = None):
        self.path = path
        self.records: list[Record] = list(existing or [])
        self.on_write = on_write
        self._lock = threading.Lock()
        self._text = path.read_text() if path.exists() else ""

    def write(self, record: Record) -> None:
        """Once the run is stopping (Ctrl-C), nothing more is written: an evaluation cut short has no verdict,
        and --resume evaluates it again."""
        if STOPPING.is_set():
            return
        line = json.dumps(record.to_json()) + "\n"
        with self._lock, open(self.path, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
            self._text += line
            self.records.append(record)
        if self.on_write is not None:
            self.on_write(record)

    def intact(self) -> bool:
        with self._lock:
            try:
                return self.path.read_text() == self._text
            except FileNotFoundError:
                return self._text == ""
            except OSError:
                return False

    def restore(self) -> None:
        with self._lock:
            self.path.write_text(self._text)


def read_records(path: Path) -> list[Record]:
    out = []
    for line in path.read_text().splitlines() if path.exists() else ():
        with contextlib.suppress(json.JSONDecodeError, TypeError):
            out.append(Record.from_json(json.loads(line)))
    return out

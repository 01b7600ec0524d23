"""Records: one frozen dataclass per solution x shape, serialized to the JSON line the user reads.

Records are appended (flushed and fsynced) as each is decided, so an interrupted run keeps what it
finished and `--resume` can skip it.
"""

from __future__ import annotations

import json
import math
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Record:
    solution: str
    problem: str
    shape: str
    status: str
    speedup: float | None = None
    speedup_compile: float | None = None
    speedup_rounds: int | None = None
    rounds: list[dict] | None = None
    times_file: str | None = None
    time_us: float | None = None
    gpu_time_us: float | None = None
    ref_time_us: float | None = None
    ref_compile_time_us: float | None = None
    ref_gpu_time_us: float | None = None
    floor_launch_us: float | None = None
    lane_launch_us: float | None = None
    floor_read_us: float | None = None
    floor_copy_us: float | None = None
    copy_ratio: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    first_mismatch: list[int] | None = None
    flags: list[str] = field(default_factory=list)
    message: str = ""
    seed: int | None = None
    timing: dict | None = None
    bytes_min: int | None = None
    bandwidth_gbps: float | None = None
    bandwidth_frac: float | None = None
    device: str = ""
    lane: int = 0
    solution_path: str = ""
    log: str = ""
    eval_seconds: float | None = None
    phase_seconds: dict = field(default_factory=dict)
    worker_seconds: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        """Non-finite figures (a relative error against a zero reference) become null."""
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = round(v, 6) if math.isfinite(v) else None
        return d

    @classmethod
    def from_json(cls, d: dict) -> Record:
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


class RecordWriter:
    """Appends records to results.jsonl; keeps the exact text it wrote, to detect and undo tampering."""

    def __init__(self, path: Path, existing: list[Record] | None = None):
        self.path = path
        self.records: list[Record] = list(existing or [])
        self._lock = threading.Lock()
        self._text = path.read_text() if path.exists() else ""

    def write(self, record: Record) -> None:
        line = json.dumps(record.to_json()) + "\n"
        with self._lock:
            with open(self.path, "a") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
            self._text += line
            self.records.append(record)

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
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            out.append(Record.from_json(json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            continue
    return out

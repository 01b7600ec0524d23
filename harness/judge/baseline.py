"""Reference baselines: `--reference-only` times each problem's reference (eager, torch.compile, graph replay) and
writes them with the machine they were timed on; `--baseline FILE` reuses them, so a run pays no torch.compile.
A baseline is refused on another GPU, driver, torch or CUDA, and an entry is used only for the same problem
source and shape parameters. Eager is timed again in every run (each speedup pairs it with the candidate's
rounds); torch.compile's figure is the baseline's compiled/eager ratio times this run's eager."""

import hashlib
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

from ..errors import UsageError
from ..stats import Measurement
from .envinfo import command_output

FORMAT = "kbharness-baseline/1"
MACHINE_KEYS = ("device", "model", "driver", "torch", "cuda")


def machine(device: str) -> dict:
    """What a baseline's figures depend on, read without touching the GPU."""
    import torch

    if device == "cuda":
        rows = command_output(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"]).splitlines()
        model, _, driver = (rows[0] if rows else ",").partition(",")
    else:
        model, driver = _cpu_model(), ""
    return {"device": device, "model": model.strip(), "driver": driver.strip(), "torch": torch.__version__,
            "cuda": torch.version.cuda or ""}


def _cpu_model() -> str:
    try:
        return next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                     if ln.startswith("model name")), platform.processor())
    except OSError:
        return platform.processor()


def entry_key(problem_text: str, shape_name: str, params: dict, precision: str) -> str:
    """One problem source, one shape's parameters, one precision."""
    blob = json.dumps([problem_text, shape_name, params, precision], sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def load(path: str, device: str) -> dict:
    """The baseline's entries, if it was timed on a machine like this one; else one line saying what differs."""
    try:
        data = json.loads(Path(path).read_text())
        if data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
            raise ValueError("not a baseline file")
    except (OSError, ValueError, AttributeError) as e:
        raise UsageError(f"--baseline {path}: cannot be read ({e})") from None
    here = machine(device)
    diff = [f"{k} {data.get('machine', {}).get(k)!r} (here {here[k]!r})" for k in MACHINE_KEYS
            if data.get("machine", {}).get(k) != here[k]]
    if diff:
        raise UsageError(f"--baseline {path}: timed on another machine: {', '.join(diff)}")
    return data["entries"]


def measurement(d: dict | None) -> Measurement | None:
    return Measurement(**d) if d else None


def scaled(m: Measurement, factor: float) -> Measurement:
    return replace(m, median_us=m.median_us * factor, iqr_us=m.iqr_us * factor, min_us=m.min_us * factor,
                   mean_us=m.mean_us * factor)


def write(path: Path, device: str, entries: dict) -> None:
    """Add entries to the baseline at path (started afresh when it was timed elsewhere)."""
    here = machine(device)
    try:
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT or data.get("machine") != here:
            raise ValueError
    except (OSError, ValueError):
        data = {"format": FORMAT, "machine": here, "entries": {}}
    data["entries"].update(entries)
    data["written"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    tmp.replace(path)

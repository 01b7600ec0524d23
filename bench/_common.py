"""Helpers shared by the bench scripts: run run_eval.py, read its records and run.json."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_eval(*args: str, log: Path | None = None, env: dict | None = None) -> tuple[float, Path, int]:
    """Run run_eval.py; return wall seconds, output folder and exit code (the folder is --out's value);
    `env` adds environment variables (its workers inherit them, but for PYTHONHASHSEED: always 0 there)."""
    out = Path(args[args.index("--out") + 1])
    t0 = time.monotonic()
    with open(log or out.with_suffix(".log"), "w") as f:
        rc = subprocess.run([sys.executable, str(REPO / "run_eval.py"), *args], cwd=REPO, stdout=f,
                            stderr=subprocess.STDOUT, env=dict(os.environ, **(env or {}))).returncode
    return time.monotonic() - t0, out, rc


def records(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_json(out: Path) -> dict:
    return json.loads((out / "run.json").read_text())


def md_table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def renamed(src: Path, folder: Path, suffix: str) -> Path:
    """The candidate with its first extension name (`name="..."`) suffixed: a new build-cache entry for the
    same compile work. Written as folder/<stem><suffix>.py."""
    text, k = re.subn(r'name="([^"]+)"', lambda m: f'name="{m.group(1)}{suffix}"', src.read_text(), count=1)
    if k != 1:
        raise SystemExit(f"{src}: no extension name to change")
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{src.stem}{suffix}.py"
    out.write_text(text)
    return out


def with_timing(path: Path, folder: Path, timing: dict, name: str | None = None, check: dict | None = None) -> Path:
    """A copy of the config in folder with timing keys overridden, the problem path made absolute and no
    solutions of its own (a bench names its candidates); `check` overrides check keys."""
    import yaml

    data = yaml.safe_load(path.read_text())
    data["problem"] = str((path.resolve().parent / data["problem"]).resolve())
    data["solutions"] = {}
    data.setdefault("check", {}).update(check or {})
    data.setdefault("timing", {}).update(timing)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / (name or path.name)
    out.write_text(yaml.safe_dump(data))
    return out

"""Helpers shared by the bench scripts: run run_eval.py, read its records and run.json, write tables, make config
variants and candidate variants."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
FAST = REPO / "solutions" / "pack_tokens" / "fast_vec16.py"
CONFIG = REPO / "configs" / "pack_tokens.yaml"


def run_eval(*args: str, log: Path | None = None, env: dict | None = None,
             repo: Path = REPO) -> tuple[float, Path, int]:
    """Run run_eval.py (of another checkout with `repo`); return wall seconds, output folder (--out's value) and
    exit code; `env` adds environment variables (workers inherit them, but for PYTHONHASHSEED: always 0 there)."""
    out = Path(args[args.index("--out") + 1])
    t0 = time.monotonic()
    with open(log or out.with_suffix(".log"), "w") as f:
        rc = subprocess.run([sys.executable, str(repo / "run_eval.py"), *args], cwd=repo, stdout=f,
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


def shape_params(name: str, config: Path = CONFIG) -> dict:
    from harness.judge.config import load_config

    return dict(next(s for s in load_config(config).shapes if s.name == name).params)


def config_variant(path: Path, folder: Path, timing: dict, name: str | None = None, check: dict | None = None) -> Path:
    """A copy of the config in folder with timing (and check) keys overridden, the problem path made absolute and
    no solutions of its own (a bench names its candidates)."""
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


def candidate_variant(folder: Path, name: str, constants: dict[str, int] | None = None, suffix: str = "") -> Path:
    """The fast kernel with module constants set (`THREADS = 128`, ...) and its extension names suffixed: a distinct
    candidate, so a distinct build, written as folder/<name>.py."""
    text = FAST.read_text()
    for key, value in (constants or {}).items():
        text, n = re.subn(rf"^{key} = \d+", f"{key} = {value}", text, count=1, flags=re.MULTILINE)
        if n != 1:
            raise SystemExit(f"{FAST} has no constant {key}")
    if suffix:
        text = re.sub(r'name="([^"]+)"', lambda m: f'name="{m.group(1)}{suffix}"', text)
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / f"{name}.py"
    out.write_text(text)
    return out

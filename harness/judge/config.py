"""Read and validate a YAML run config into typed settings; every error is one line naming file, key and value.

Every settings key is read by the type of its default in harness.settings, within BOUNDS."""

import math
from dataclasses import fields
from pathlib import Path
from typing import Any

import yaml

from ..errors import UsageError, read_text
from ..settings import (
    DEVICES,
    PRECISIONS,
    SPEEDUP_METRICS,
    STATIC_POLICIES,
    BuildSettings,
    CheckSettings,
    Config,
    Shape,
    Timeouts,
    TimingSettings,
    Tolerance,
)

INF = math.inf
BOUNDS: dict[str, Any] = {
    # numbers: (lowest, highest, lowest excluded); integers: lowest; strings: the allowed values
    "check.seeds": 1, "check.verify_timed": 1, "timing.min_runs": 2, "timing.max_runs": 2, "timing.rounds": 1,
    "build.jobs": 0, "timing.target_rse": (0.0, 1.0, True), "timing.warmup_ms": (0.0, INF, False),
    "timing.budget_s": (0.0, INF, True), "timing.speedup_quantile": (0.0, 0.5, True),
    "timing.launch_cover": (0.0, 10.0, False),
    "timing.speedup_metric": SPEEDUP_METRICS, "build.timeout_s": (0.0, INF, True),
    "timeouts.load_s": (0.0, INF, True), "timeouts.shape_s": (0.0, INF, True), "static_checks": STATIC_POLICIES,
    "check.precision": PRECISIONS,
    "atol": (0.0, INF, False), "rtol": (0.0, INF, False),
}


class _File:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, want: str, got: Any) -> None:
        raise UsageError(f"{self.path}: {key}: {want}, got {got!r}")

    def mapping(self, data: Any, key: str, known: tuple[str, ...] | None = None) -> dict:
        data = {} if data is None else data
        if not isinstance(data, dict):
            self.fail(key or "(top level)", "expected a mapping", data)
        for k in data:
            if known is not None and k not in known:
                where = f"{key}.{k}" if key else str(k)
                raise UsageError(f"{self.path}: unknown key '{where}' (known: {', '.join(known)})")
        return data

    def value(self, key: str, v: Any, default: Any) -> Any:
        """v checked against the type of its default and its BOUNDS (looked up by key, then by its last part)."""
        rule = BOUNDS.get(key, BOUNDS.get(key.rsplit(".", 1)[-1]))
        if isinstance(default, bool):
            if not isinstance(v, bool):
                self.fail(key, "expected true or false", v)
        elif isinstance(default, str):
            if v not in rule:
                self.fail(key, f"expected one of {', '.join(rule)}", v)
        elif isinstance(default, int):
            if not isinstance(v, int) or isinstance(v, bool) or v < rule:
                self.fail(key, f"expected an integer >= {rule}", v)
        else:
            lo, hi, lo_open = rule
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            if not (ok and (v > lo if lo_open else v >= lo) and v <= hi):
                bound = f"{'>' if lo_open else '>='} {lo:g}" + (f" and <= {hi:g}" if hi != INF else "")
                self.fail(key, f"expected a number {bound}", v)
            v = float(v)
        return v

    def settings(self, cls: type, data: Any, name: str, **given: Any) -> Any:
        """One settings class from its section of the file, defaults filled in; `given` fields are not read."""
        data = self.mapping(data, name, tuple(f.name for f in fields(cls)))
        inst = cls()
        return cls(**given, **{f.name: self.value(f"{name}.{f.name}", data.get(f.name, getattr(inst, f.name)),
                                                  getattr(inst, f.name)) for f in fields(cls) if f.name not in given})

    def file(self, base: Path, value: Any, key: str) -> Path:
        if not isinstance(value, str) or not value:
            self.fail(key, "expected a file path", value)
        p = (base / value).resolve()
        if not p.is_file():
            raise UsageError(f"{self.path}: {key}: file not found: {value}")
        return p


def read_yaml(path: str | Path) -> Any:
    file = Path(path)
    if not file.is_file():
        raise UsageError(f"{path}: config file not found")
    try:
        return yaml.safe_load(read_text(file, "YAML text file"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UsageError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None


def load_config(path: str | Path) -> Config:
    """A YAML run config, or a KernelBench problem file alone: its get_inputs() as written is the one shape
    ('default'), every setting its default."""
    file = Path(path)
    if file.suffix == ".py" and file.is_file():
        return Config(path=file.resolve(), problem=file.resolve(), solutions={d: () for d in DEVICES},
                      shapes=(Shape("default", {}),))
    return config_from(read_yaml(file), file)


def config_from(data: Any, file: Path) -> Config:
    """A run config from its mapping, read from `file` (errors name it; relative paths start beside it)."""
    f = _File(file)
    top = f.mapping(data, "", ("problem", "solutions", "shapes", "cpu_shapes", "check", "timing", "build", "timeouts",
                               "static_checks"))
    base = file.resolve().parent
    if "problem" not in top:
        raise UsageError(f"{file}: missing key 'problem'")
    problem = f.file(base, top["problem"], "problem")
    sols = f.mapping(top.get("solutions"), "solutions", DEVICES)
    solutions: dict[str, tuple[Path, ...]] = {}
    for dev in DEVICES:
        items = sols.get(dev) or []
        if not isinstance(items, list):
            f.fail(f"solutions.{dev}", "expected a list of files", items)
        solutions[dev] = tuple(f.file(base, v, f"solutions.{dev}[{i}]") for i, v in enumerate(items))
    shapes = []
    for name, params in f.mapping(top.get("shapes"), "shapes").items():
        for k, v in f.mapping(params, f"shapes.{name}").items():
            if not isinstance(v, (int, float, str, bool)) and v is not None:
                f.fail(f"shapes.{name}.{k}", "expected a number, string, boolean or null", v)
        shapes.append(Shape(str(name), dict(params or {})))
    shapes = tuple(shapes) or (Shape("default", {}),)
    chk = f.mapping(top.get("check"), "check", tuple(x.name for x in fields(CheckSettings)))
    tolerance = {}
    for dtype, spec in f.mapping(chk.get("tolerance"), "check.tolerance").items():
        tolerance[str(dtype)] = f.settings(Tolerance, spec, f"check.tolerance.{dtype}")
    check = f.settings(CheckSettings, chk, "check", tolerance=tolerance)
    timing = f.settings(TimingSettings, top.get("timing"), "timing")
    if timing.max_runs < timing.min_runs:
        f.fail("timing.max_runs", f"expected at least timing.min_runs ({timing.min_runs})", timing.max_runs)
    static = f.value("static_checks", top.get("static_checks", Config.static_checks), Config.static_checks)
    cpu_shapes = top.get("cpu_shapes") or []
    names = {s.name for s in shapes}
    if not isinstance(cpu_shapes, list) or any(n not in names for n in cpu_shapes):
        f.fail("cpu_shapes", f"expected a list of shape names ({', '.join(names)})", cpu_shapes)
    return Config(path=file.resolve(), problem=problem, solutions=solutions, shapes=shapes, check=check,
                  timing=timing, build=f.settings(BuildSettings, top.get("build"), "build"),
                  timeouts=f.settings(Timeouts, top.get("timeouts"), "timeouts"), static_checks=static,
                  cpu_shapes=tuple(cpu_shapes))
